//! Profiles: named stores in a configuration file, so that a store URL need not be typed and its password is
//! never on the command line (where `ps` shows it). `--profile NAME` (or `SALTBLOB_PROFILE`) picks one:
//!
//! ```toml
//! # ~/.config/saltblob/config.toml
//! [profiles.media]
//! store = "cql://app@10.0.0.1,10.0.0.2:9042/media"
//! password_file = "/etc/saltblob/media-password"   # mode 0600; or password_env = "MEDIA_CQL_PASSWORD"
//!
//! [profiles.local]
//! store = "rocksdb:///var/lib/saltblob"
//! ```
//!
//! The file is `$SALTBLOB_CONFIG`, else `$XDG_CONFIG_HOME/saltblob/config.toml`, else
//! `$HOME/.config/saltblob/config.toml`.

use std::path::{Path, PathBuf};

use crate::secret_file::read_private;

/// The variable that names the configuration file.
pub(crate) const CONFIG_ENV: &str = "SALTBLOB_CONFIG";

/// The keys a profile may hold.
const PROFILE_KEYS: [&str; 3] = ["store", "password_file", "password_env"];

/// Where the configuration file is: see the [module documentation](self).
pub(crate) fn config_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var(CONFIG_ENV)
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("saltblob/config.toml")))
        .or_else(|| var("HOME").map(|d| d.join(".config/saltblob/config.toml")))
}

/// The store URL of profile `name` in the configuration file at `path`, with the password its `password_file`
/// or `password_env` holds put into it.
///
/// # Errors
/// What to fix, naming the file and the profile: a file that cannot be read or parsed, a profile it lacks (the
/// ones it has are named), an unknown key, a missing `store`, a password source that cannot be read.
pub(crate) fn store_url(path: &Path, name: &str) -> Result<String, String> {
    let at = format!("profile \"{name}\" of {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "--profile {name}: cannot read the configuration file {}: {e}",
            path.display()
        )
    })?;
    let doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("{} is not valid TOML: {e}", path.display()))?;
    let profiles = doc.get("profiles").and_then(|p| p.as_table_like());
    let Some(profile) = profiles
        .and_then(|p| p.get(name))
        .and_then(|p| p.as_table_like())
    else {
        let known: Vec<&str> = profiles
            .map(|p| p.iter().map(|(k, _)| k).collect())
            .unwrap_or_default();
        return Err(format!(
            "{} has no [profiles.{name}] (profiles there: {})",
            path.display(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    };
    if let Some((key, _)) = profile.iter().find(|(k, _)| !PROFILE_KEYS.contains(k)) {
        return Err(format!(
            "{at}: unknown key \"{key}\" (known: {})",
            PROFILE_KEYS.join(", ")
        ));
    }
    let text_of = |key: &str| -> Result<Option<&str>, String> {
        match profile.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| format!("{at}: {key} must be a string")),
        }
    };
    let store = text_of("store")?.ok_or_else(|| format!("{at}: no store = \"URL\""))?;
    let password = match (text_of("password_file")?, text_of("password_env")?) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{at}: give password_file or password_env, not both"
            ));
        }
        (Some(file), None) => {
            let mut bytes =
                read_private(Path::new(file), &format!("password_file of {at}"))?.to_vec();
            while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                bytes.pop();
            }
            Some(bytes)
        }
        (None, Some(var)) => Some(
            std::env::var(var)
                .map_err(|_| format!("{at}: password_env names {var}, which is not set"))?
                .into_bytes(),
        ),
        (None, None) => None,
    };
    match password {
        None => Ok(store.to_owned()),
        Some(password) => with_password(store, &password).map_err(|e| format!("{at}: {e}")),
    }
}

/// `url` with `password` after its user name, %-encoded (every byte but letters, digits and `-._~`).
fn with_password(url: &str, password: &[u8]) -> Result<String, String> {
    let start = url
        .find("://")
        .map(|i| i + 3)
        .ok_or("store is not a URL (scheme://...)")?;
    let Some(at) = url[start..].find('@').map(|i| start + i) else {
        return Err(
            "a password needs a user name in the store URL (cql://USER@host/keyspace)".to_owned(),
        );
    };
    if url[start..at].contains(':') {
        return Err(
            "the store URL already holds a password: keep it only in the password file".to_owned(),
        );
    }
    let mut encoded = String::with_capacity(password.len() * 3);
    for &b in password {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(format!("{}:{encoded}{}", &url[..at], &url[at..]))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn config(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("config.toml");
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_profile_names_its_store_and_its_password_comes_from_a_private_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("pw");
        std::fs::write(&secret, "p@ss/w:rd%\n").expect("write");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let path = config(
            dir.path(),
            &format!(
                "[profiles.media]\nstore = \"cql://app@h1,h2:9042/media\"\npassword_file = \"{}\"\n\n\
                 [profiles.local]\nstore = \"rocksdb:///var/lib/sb\"\n",
                secret.display()
            ),
        );
        assert_eq!(
            store_url(&path, "media").expect("media"),
            "cql://app:p%40ss%2Fw%3Ard%25@h1,h2:9042/media"
        );
        assert_eq!(
            store_url(&path, "local").expect("local"),
            "rocksdb:///var/lib/sb"
        );

        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = store_url(&path, "media").expect_err("a readable password file");
        assert!(e.contains("accessible by group or others"), "{e}");
        let e = store_url(&path, "nope").expect_err("no such profile");
        assert!(
            e.contains("has no [profiles.nope]") && e.contains("media, local"),
            "{e}"
        );
    }

    #[test]
    fn bad_profiles_are_refused_with_what_to_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (text, says) in [
            ("[profiles.p]\nstor = \"x\"\n", "unknown key \"stor\""),
            ("[profiles.p]\npassword_env = \"X\"\n", "no store"),
            ("[profiles.p]\nstore = 3\n", "store must be a string"),
            ("[profiles.p\n", "not valid TOML"),
            (
                "[profiles.p]\nstore = \"cql://h/ks\"\npassword_env = \"SALTBLOB_TEST_UNSET_PW\"\n",
                "which is not set",
            ),
        ] {
            let path = config(dir.path(), text);
            let e = store_url(&path, "p").expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(with_password("cql://h/ks", b"x").is_err(), "no user name");
        assert!(
            with_password("cql://u:p@h/ks", b"x").is_err(),
            "a password already"
        );
    }
}
