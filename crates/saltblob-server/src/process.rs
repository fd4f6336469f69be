//! The process metrics under Prometheus' standard names (`process_resident_memory_bytes`, …), read from
//! `/proc/self` on Linux; none elsewhere. A figure that cannot be read or parsed is left out, never guessed.

/// Clock ticks per second of the times in `/proc/<pid>/stat` (the kernel's `USER_HZ`: 100 on every
/// architecture's user ABI; Prometheus' own process collector assumes it too).
const USER_HZ: f64 = 100.0;

/// One process figure: its name, type, help text and value.
pub(crate) type Figure = (&'static str, &'static str, &'static str, f64);

/// The process figures that could be read now, in a fixed order.
pub(crate) fn figures() -> Vec<Figure> {
    if !cfg!(target_os = "linux") {
        return Vec::new();
    }
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let status = read("/proc/self/status").map(|s| parse_status(&s));
    let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
    let boot = read("/proc/stat").and_then(|s| parse_boot_time(&s));
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as f64);
    let max_fds = read("/proc/self/limits").and_then(|s| parse_max_open_files(&s));

    let mut out = Vec::new();
    let mut push = |name, kind, help, value: Option<f64>| {
        if let Some(value) = value {
            out.push((name, kind, help, value));
        }
    };
    push(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        stat.map(|s| (s.utime_ticks as f64 + s.stime_ticks as f64) / USER_HZ),
    );
    push(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        open_fds,
    );
    push(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors (the soft limit).",
        max_fds,
    );
    push(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        status.and_then(|s| s.virtual_bytes).map(|b| b as f64),
    );
    push(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        status.and_then(|s| s.resident_bytes).map(|b| b as f64),
    );
    push(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        stat.zip(boot)
            .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
    );
    out
}

/// What `/proc/self/status` says of memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Memory {
    virtual_bytes: Option<u64>,
    resident_bytes: Option<u64>,
}

/// `VmSize` and `VmRSS` of `/proc/<pid>/status` (`VmRSS:   1972 kB`), in bytes.
fn parse_status(text: &str) -> Memory {
    let kib = |field: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(|v| v.checked_mul(1024))
    };
    Memory {
        virtual_bytes: kib("VmSize"),
        resident_bytes: kib("VmRSS"),
    }
}

/// The times of `/proc/<pid>/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    utime_ticks: u64,
    stime_ticks: u64,
    /// When the process started, after boot.
    start_ticks: u64,
}

/// Fields 14 (utime), 15 (stime) and 22 (starttime) of `/proc/<pid>/stat`. The command name (field 2, in
/// parentheses) may hold spaces and parentheses itself, so the fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts with field 3 (the state): field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
    })
}

/// The boot time (Unix seconds) in `/proc/stat`'s `btime` line.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of the `Max open files` line of `/proc/<pid>/limits`; `None` when it is `unlimited`.
fn parse_max_open_files(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse::<u64>().ok())
        .map(|n| n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsaltblob\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 2000000 kB\n\
        VmSize:\t 1843200 kB\nVmLck:\t       0 kB\nVmHWM:\t  140000 kB\nVmRSS:\t  131072 kB\nThreads:\t12\n";

    #[test]
    fn status_gives_virtual_and_resident_memory_in_bytes() {
        assert_eq!(
            parse_status(STATUS),
            Memory {
                virtual_bytes: Some(1_843_200 * 1024),
                resident_bytes: Some(131_072 * 1024),
            }
        );
        // A kernel thread has no Vm lines; a damaged line is left out, not guessed.
        assert_eq!(parse_status("Name:\tkthreadd\n"), Memory::default());
        assert_eq!(
            parse_status("VmSize:\tlots kB\nVmRSS:\t12 MB\nVmRSSX:\t1 kB\n"),
            Memory::default()
        );
    }

    #[test]
    fn stat_counts_its_fields_after_the_last_parenthesis() {
        let stat = "16609 (salt blob) (x)) S 16607 16607 14751 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 \
                    12 0 61042 3133440 393 18446744073709551615 94385921867776 0\n";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                utime_ticks: 250,
                stime_ticks: 75,
                start_ticks: 61042,
            })
        );
        assert_eq!(parse_stat("16609 (cut short) S 1 2 3"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn boot_time_and_the_open_files_limit() {
        let stat = "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\nctxt 99\nbtime 1796222065\nprocesses 7\n";
        assert_eq!(parse_boot_time(stat), Some(1_796_222_065));
        assert_eq!(parse_boot_time("cpu 1 2\n"), None);

        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            20000                524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(20_000.0));
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited   files\n"
            ),
            None
        );
        assert_eq!(parse_max_open_files(""), None);
    }

    #[test]
    fn this_process_has_its_figures_on_linux() {
        let names: Vec<&str> = figures().iter().map(|f| f.0).collect();
        if cfg!(target_os = "linux") {
            for name in [
                "process_cpu_seconds_total",
                "process_open_fds",
                "process_max_fds",
                "process_virtual_memory_bytes",
                "process_resident_memory_bytes",
                "process_start_time_seconds",
            ] {
                assert!(names.contains(&name), "{name} missing from {names:?}");
            }
        } else {
            assert!(names.is_empty(), "{names:?}");
        }
    }
}
