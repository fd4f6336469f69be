//! Which block device holds a directory, and the sector sizes the kernel reports for it (Linux sysfs).
//!
//! The directory's `st_dev` names the device (`/sys/dev/block/MAJ:MIN`); a partition's queue limits are its
//! parent disk's. When `st_dev` is an anonymous device (overlay, btrfs, tmpfs, network file systems), the mount
//! table says what lies underneath: an overlay's upper directory, or the mount's source device.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// What the kernel says about the device behind a directory. Fields are `None` where it could not be found;
/// `notes` says how it was found and what the numbers mean.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceInfo {
    /// The directory examined.
    pub dir: PathBuf,
    /// `MAJ:MIN` of the directory's file system (`st_dev`).
    pub st_dev: String,
    /// Mount point of that file system.
    pub mount_point: Option<String>,
    /// File system type (ext4, xfs, overlay, …).
    pub filesystem: Option<String>,
    /// Mount source (`/dev/vda1`, `overlay`, …).
    pub mount_source: Option<String>,
    /// Whether the file system discards freed blocks online (mount option `discard`, `discard=sync` or
    /// `discard=async`): then deleting a file sends the device a discard of its blocks (ext4 issues them at
    /// the journal's commit), which synced commits may wait behind.
    pub online_discard: Option<bool>,
    /// Kernel name of the block device whose queue limits were read (`vda`, `nvme0n1`, …).
    pub device: Option<String>,
    /// `MAJ:MIN` of that device.
    pub device_dev: Option<String>,
    /// The partition the file system is on, when it is on one (its queue limits are the parent's).
    pub partition: Option<String>,
    /// sysfs directory read.
    pub sysfs: Option<String>,
    /// `queue/physical_block_size`: the sector the device writes atomically.
    pub physical_block_size: Option<u64>,
    /// `queue/logical_block_size`: the smallest I/O the device accepts.
    pub logical_block_size: Option<u64>,
    /// `queue/rotational`.
    pub rotational: Option<bool>,
    /// `queue/max_sectors_kb`: the largest request the kernel sends to the device, in KiB.
    pub max_sectors_kb: Option<u64>,
    /// `queue/scheduler`: the I/O scheduler in use (`mq-deadline`, `bfq`, `kyber`, `none`). Only `mq-deadline`
    /// and `bfq` honour the idle I/O class that bulk extent I/O runs in (`rocksdb://…?bulk_idle_io`).
    pub io_scheduler: Option<String>,
    /// How the device was found and what the numbers mean.
    pub notes: Vec<String>,
    /// Things worth acting on (e.g. physical ≠ logical sector size).
    pub warnings: Vec<String>,
}

/// Splits a Linux `dev_t` (glibc encoding) into major and minor numbers.
pub fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff);
    (major, minor)
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// `MAJ:MIN`.
    pub dev: String,
    /// Mount point.
    pub point: String,
    /// File system type.
    pub fstype: String,
    /// Source (device or pseudo name).
    pub source: String,
    /// Per-mount options (`rw,relatime`).
    pub options: String,
    /// Super-block options (e.g. an overlay's `upperdir=`, ext4's `discard`).
    pub super_options: String,
}

impl Mount {
    /// The mount's online-discard option, from its per-mount or super-block options: `discard` (or
    /// `discard=sync`, `discard=async`), unless a later `nodiscard` turns it off. `None` when neither is given.
    pub fn discard_option(&self) -> Option<&str> {
        let mut found = None;
        for o in self.options.split(',').chain(self.super_options.split(',')) {
            if o == "discard" || o.starts_with("discard=") {
                found = Some(o);
            } else if o == "nodiscard" {
                found = None;
            }
        }
        found
    }
}

/// Parses `/proc/self/mountinfo` text.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let mut r = right.split(' ');
            Some(Mount {
                dev: (*l.get(2)?).to_owned(),
                point: unescape(l.get(4)?),
                options: (*l.get(5)?).to_owned(),
                fstype: r.next()?.to_owned(),
                source: unescape(r.next()?),
                super_options: r.next().unwrap_or("").to_owned(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'\\'
            && let Some(code) = s
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        {
            out.push(code);
            i += 4;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `path` (canonical): the last-mounted one with the longest mount point that contains it.
pub fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        if path.starts_with(&m.point)
            && best.is_none_or(|b| {
                Path::new(&m.point).components().count() >= Path::new(&b.point).components().count()
            })
        {
            best = Some(m);
        }
    }
    best
}

/// What to do about a store on a file system mounted with online discard.
fn discard_warning(point: &str, option: &str) -> String {
    format!(
        "{point} is mounted with online discard ({option}): deleting a file discards its blocks on the device, \
         and synced commits wait behind those discards. Each replaced or deleted large value frees an extent \
         file, so small puts stall while huge values are deleted (BENCHMARKS.md, *online discard*: 64 KiB synced \
         appends beside a loop writing and deleting 60 MiB files, P99 1.6 ms without discard, 2.8 s with it). \
         Remount with nodiscard and trim on a schedule instead (fstrim, e.g. systemd's fstrim.timer)."
    )
}

/// The scheduler in use, from `queue/scheduler`'s list, where it is the one in brackets
/// (`none [mq-deadline] kyber bfq`); a queue without a choice lists one name (`none`).
fn active_scheduler(list: &str) -> Option<String> {
    let names: Vec<&str> = list.split_whitespace().collect();
    let chosen = names
        .iter()
        .find_map(|n| n.strip_prefix('[')?.strip_suffix(']'));
    match (chosen, names.as_slice()) {
        (Some(name), _) | (None, &[name]) => Some(name.to_owned()),
        _ => None,
    }
}

/// A warning when `scheduler` ignores I/O priorities, so that bulk extent I/O in the idle class is not held back
/// behind small commits.
fn scheduler_warning(device: &str, scheduler: &str) -> Option<String> {
    (scheduler != "mq-deadline" && scheduler != "bfq").then(|| {
        format!(
            "{device}'s I/O scheduler is {scheduler}, which ignores I/O priorities: huge values' extent reads and \
             writes run in the idle I/O class (rocksdb bulk_idle_io) so that small puts' synced commits pass them, \
             and here they will not (BENCHMARKS.md, *bulk extent I/O in the idle class*: the small P99 beside \
             a bulk loop 45-67 ms at normal priority, 24-29 ms idle, on mq-deadline). Where the device has a queue \
             deep enough to need no scheduler (many NVMe drives) this may not matter; otherwise choose \
             mq-deadline: echo mq-deadline > /sys/block/{device}/queue/scheduler (a udev rule keeps it)."
        )
    })
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn read_u64(path: &Path) -> Option<u64> {
    read_trim(path)?.parse().ok()
}

/// Finds the device behind `dir` and reads its sector sizes.
pub fn inspect(dir: &Path) -> std::io::Result<DeviceInfo> {
    let dir = std::fs::canonicalize(dir)?;
    let meta = std::fs::metadata(&dir)?;
    let (major, minor) = major_minor(meta.dev());
    let mut info = DeviceInfo {
        dir: dir.clone(),
        st_dev: format!("{major}:{minor}"),
        ..DeviceInfo::default()
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    let mount = mount_of(&mounts, &dir).cloned();
    if let Some(m) = &mount {
        info.mount_point = Some(m.point.clone());
        info.filesystem = Some(m.fstype.clone());
        info.mount_source = Some(m.source.clone());
        let discard = m.discard_option();
        info.online_discard = Some(discard.is_some());
        if let Some(option) = discard {
            info.warnings.push(discard_warning(&m.point, option));
        }
    }

    let mut sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if sys.exists() {
        info.notes.push(format!(
            "found through the directory's st_dev {major}:{minor}"
        ));
    } else {
        info.notes.push(format!(
            "st_dev {major}:{minor} is not a block device (an anonymous device: overlay, btrfs, tmpfs or a \
             network file system)"
        ));
        match &mount {
            Some(m) if m.fstype == "overlay" => {
                let upper = m
                    .super_options
                    .split(',')
                    .find_map(|o| o.strip_prefix("upperdir="));
                match upper.and_then(|u| std::fs::metadata(u).ok().map(|md| (u, md))) {
                    Some((u, md)) => {
                        let (ma, mi) = major_minor(md.dev());
                        sys = PathBuf::from(format!("/sys/dev/block/{ma}:{mi}"));
                        info.notes.push(format!(
                            "overlay mount: writes land in its upper directory {u}, on device {ma}:{mi}"
                        ));
                    }
                    None => info.notes.push(
                        "overlay mount whose upper directory is not visible from here (a container): the \
                         device underneath cannot be named"
                            .into(),
                    ),
                }
            }
            Some(m) if m.source.starts_with("/dev/") => {
                let source = std::fs::canonicalize(&m.source)
                    .unwrap_or_else(|_| PathBuf::from(&m.source));
                if let Some(name) = source.file_name() {
                    sys = Path::new("/sys/class/block").join(name);
                    info.notes.push(format!(
                        "{} mount from {}: used the mount source's device",
                        m.fstype,
                        source.display()
                    ));
                }
            }
            Some(m) if m.fstype == "tmpfs" || m.fstype == "ramfs" => info.notes.push(format!(
                "{} is memory, not a block device: there are no sectors and O_DIRECT bandwidth is memory bandwidth",
                m.fstype
            )),
            Some(m) => info.notes.push(format!(
                "{} mount from {}: no local block device to read",
                m.fstype, m.source
            )),
            None => info
                .notes
                .push("no mount found for the directory in /proc/self/mountinfo".into()),
        }
    }

    let Ok(dev_dir) = std::fs::canonicalize(&sys) else {
        info.warnings
            .push("sector sizes unknown: no sysfs entry for the device".into());
        return Ok(info);
    };
    info.device_dev = read_trim(&dev_dir.join("dev"));
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let queue_owner = if dev_dir.join("partition").exists() {
        let parent = dev_dir.parent().map(Path::to_path_buf).unwrap_or_default();
        info.partition = name(&dev_dir);
        info.notes.push(format!(
            "{} is a partition of {}: queue limits are the parent disk's",
            name(&dev_dir).unwrap_or_default(),
            name(&parent).unwrap_or_default()
        ));
        parent
    } else {
        dev_dir.clone()
    };
    info.device = name(&queue_owner);
    info.sysfs = Some(queue_owner.display().to_string());
    let queue = queue_owner.join("queue");
    info.physical_block_size = read_u64(&queue.join("physical_block_size"));
    info.logical_block_size = read_u64(&queue.join("logical_block_size"));
    info.rotational = read_u64(&queue.join("rotational")).map(|r| r == 1);
    info.max_sectors_kb = read_u64(&queue.join("max_sectors_kb"));
    info.io_scheduler = read_trim(&queue.join("scheduler")).and_then(|s| active_scheduler(&s));
    if let Some(warning) = info
        .io_scheduler
        .as_deref()
        .and_then(|s| scheduler_warning(info.device.as_deref().unwrap_or("the device"), s))
    {
        info.warnings.push(warning);
    }

    let path_text = queue_owner.display().to_string();
    if path_text.contains("/virtio") {
        info.notes.push(
            "virtio disk: these are the sizes the hypervisor advertises; the host's medium behind it (and its \
             caches) is not visible from the guest, and `rotational` is not meaningful"
                .into(),
        );
    }
    if let Some(dm) = read_trim(&queue_owner.join("dm/name")) {
        info.notes.push(format!(
            "device-mapper device {dm} (LVM, crypt, …): its limits are stacked from the devices under it"
        ));
    }
    match (info.physical_block_size, info.logical_block_size) {
        (Some(p), Some(l)) if p != l => info.warnings.push(format!(
            "physical sector {p} B differs from logical sector {l} B: the device accepts {l}-byte I/O but writes \
             {p}-byte sectors, so I/O not aligned to {p} B costs a read-modify-write (saltblob's chunks are \
             multiples of 4 KiB). Some NVMe firmware reports 512 for 4096."
        )),
        (None, _) | (_, None) => info
            .warnings
            .push(format!("sector sizes unreadable under {}", queue.display())),
        _ => {}
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_splits_like_glibc() {
        assert_eq!(major_minor(0xfe00), (254, 0));
        assert_eq!(major_minor(0x0803), (8, 3));
        // major 259 (NVMe extended), minor 1: dev_t = (259 << 8) | 1 in the low 20 bits scheme.
        assert_eq!(major_minor((259 << 8) | 1), (259, 1));
        assert_eq!(major_minor((0x123 << 20) | 0x45), (0, 0x123 << 8 | 0x45));
    }

    #[test]
    fn mountinfo_lines_parse_and_the_deepest_mount_wins() {
        let text = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 22 0:27 / /tmp rw shared:5 - tmpfs tmpfs rw,size=10g
31 22 0:45 / /var/lib/my\\040data rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[2].point, "/var/lib/my data");
        let m = mount_of(&mounts, Path::new("/tmp/x")).expect("found");
        assert_eq!((m.fstype.as_str(), m.dev.as_str()), ("tmpfs", "0:27"));
        let m = mount_of(&mounts, Path::new("/home/me")).expect("found");
        assert_eq!(m.source, "/dev/vda");
        let m = mount_of(&mounts, Path::new("/var/lib/my data/db")).expect("found");
        assert!(m.super_options.contains("upperdir=/u"));
        assert_eq!(m.options, "rw");
        // A path merely sharing a prefix string is not under the mount point.
        let m = mount_of(&mounts, Path::new("/tmpfoo")).expect("found");
        assert_eq!(m.point, "/");
    }

    #[test]
    fn online_discard_is_found_in_either_option_list_and_nodiscard_turns_it_off() {
        let mount = |options: &str, super_options: &str| Mount {
            dev: "254:0".into(),
            point: "/".into(),
            fstype: "ext4".into(),
            source: "/dev/vda".into(),
            options: options.into(),
            super_options: super_options.into(),
        };
        assert_eq!(
            mount("rw,relatime", "rw,discard,errors=remount-ro").discard_option(),
            Some("discard")
        );
        assert_eq!(mount("rw,discard", "rw").discard_option(), Some("discard"));
        assert_eq!(
            mount("rw", "rw,ssd,discard=async").discard_option(),
            Some("discard=async")
        );
        assert_eq!(
            mount("rw,relatime", "rw,resv_strict").discard_option(),
            None
        );
        assert_eq!(mount("rw", "rw,discard,nodiscard").discard_option(), None);
        // An option that merely contains the word is not it.
        assert_eq!(mount("rw", "rw,nodiscard_hint=1").discard_option(), None);
        let warning = discard_warning("/", "discard");
        assert!(
            warning.contains("nodiscard") && warning.contains("fstrim"),
            "{warning}"
        );
    }

    #[test]
    fn the_scheduler_in_use_is_the_bracketed_one_and_only_priority_blind_ones_are_warned_of() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(
            active_scheduler("[none] mq-deadline kyber bfq").as_deref(),
            Some("none")
        );
        assert_eq!(active_scheduler("none\n").as_deref(), Some("none"));
        assert_eq!(active_scheduler("none mq-deadline"), None);
        assert_eq!(active_scheduler(""), None);
        assert!(scheduler_warning("vda", "mq-deadline").is_none());
        assert!(scheduler_warning("sda", "bfq").is_none());
        for blind in ["none", "kyber"] {
            let warning = scheduler_warning("nvme0n1", blind).expect("warned");
            assert!(
                warning.contains(blind)
                    && warning.contains("bulk_idle_io")
                    && warning.contains("/sys/block/nvme0n1/queue/scheduler"),
                "{warning}"
            );
        }
    }

    #[test]
    fn the_current_directory_has_a_device() {
        let info = inspect(Path::new(".")).expect("inspects");
        assert!(!info.st_dev.is_empty());
        assert!(!info.notes.is_empty(), "{info:?}");
        // Its mount is found, so whether it discards online is known, and a warning goes with it.
        assert!(info.mount_point.is_some(), "{info:?}");
        let discard = info.online_discard.expect("online_discard known");
        assert_eq!(
            discard,
            info.warnings.iter().any(|w| w.contains("online discard")),
            "{info:?}"
        );
    }
}
