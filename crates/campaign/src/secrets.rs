//! Secrets a campaign needs to launch a server but must never store or show: the values of knobs
//! bound to secret-looking environment variables (names with KEY, TOKEN, SECRET or PASSWORD, and
//! those given with `--secret-env`) and the user information of a model URL
//! (`https://user:password@host/...`).
//!
//! The journal, the reports, titles and fingerprints hold a placeholder (`<secret:N>`); the value
//! is kept in `DIR/secrets.json`, readable by its owner only (mode 0600), and put back into the
//! argv and environment of the launched process alone ([`unseal`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{CampaignError, Result};

/// The file beside the journal.
pub const FILE: &str = "secrets.json";

/// Whether an environment variable's value is a secret.
pub fn is_secret_name(name: &str, secret_env: &[String]) -> bool {
    let u = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| u.contains(w)) || secret_env.iter().any(|s| s == name)
}

/// The most the secrets file may hold: a handful of tokens.
const MAX_SECRETS_FILE: u64 = servetune_io::MIB;

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

fn read(dir: &Path) -> Result<Vec<String>> {
    let p = path(dir);
    match servetune_io::read_bytes(&p, &p.display().to_string(), MAX_SECRETS_FILE) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            CampaignError::Runtime(format!("{}: not a secrets file ({e}); restore it, or re-create the campaign", p.display()))
        }),
        Err(servetune_io::ReadError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(CampaignError::Runtime(e.to_string())),
    }
}

/// Stores `value` in `dir`'s secrets file and returns its placeholder.
pub fn seal(dir: &Path, value: &str) -> Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut all = read(dir)?;
    let n = match all.iter().position(|v| v == value) {
        Some(i) => i + 1,
        None => {
            all.push(value.to_string());
            all.len()
        }
    };
    std::fs::create_dir_all(dir).map_err(|e| CampaignError::Runtime(format!("{}: cannot create it ({e})", dir.display())))?;
    let p = path(dir);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let body = serde_json::to_vec(&all).map_err(|e| CampaignError::Runtime(e.to_string()))?;
    let write = || -> std::io::Result<()> {
        // A fresh file, never one already there: a planted link at the name must not receive the secrets.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &p)
    };
    write().map_err(|e| CampaignError::Runtime(format!("{}: cannot write it ({e})", p.display())))?;
    Ok(format!("<secret:{n}>"))
}

/// `text` with every placeholder replaced by its value (for the launched process only).
pub fn unseal(dir: &Path, text: &str) -> Result<String> {
    if !text.contains("<secret:") {
        return Ok(text.to_string());
    }
    let all = read(dir)?;
    let mut out = text.to_string();
    for (i, v) in all.iter().enumerate() {
        out = out.replace(&format!("<secret:{}>", i + 1), v);
    }
    if out.contains("<secret:") {
        return Err(CampaignError::Runtime(format!(
            "{}: a secret the launch needs is missing; restore the file, or give the value again (campaign add --set)",
            path(dir).display()
        )));
    }
    Ok(out)
}

/// The launch's argv and environment with the secrets put back.
pub fn unseal_launch(dir: &Path, argv: &[String], env: &BTreeMap<String, String>) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let argv = argv.iter().map(|w| unseal(dir, w)).collect::<Result<Vec<_>>>()?;
    let env = env.iter().map(|(k, v)| Ok((k.clone(), unseal(dir, v)?))).collect::<Result<BTreeMap<_, _>>>()?;
    Ok((argv, env))
}

/// A URL's user information (`user:password@`), sealed: `https://user:pw@host/m` becomes
/// `https://<secret:1>@host/m`. Text that is not such a URL is returned as it is.
pub fn seal_url(dir: &Path, s: &str) -> Result<String> {
    let Some((scheme, rest)) = s.split_once("://") else { return Ok(s.to_string()) };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return Ok(s.to_string()) };
    let sealed = seal(dir, &rest[..at])?;
    Ok(format!("{scheme}://{sealed}{}", &rest[at..]))
}

/// Knobs whose template binds them to a secret-looking environment variable, sealed.
pub fn seal_knobs(
    dir: &Path,
    engine: &crate::engine::EngineTemplate,
    knobs: &BTreeMap<String, String>,
    secret_env: &[String],
) -> Result<BTreeMap<String, String>> {
    knobs
        .iter()
        .map(|(k, v)| {
            let secret = engine.knob(k).and_then(|kn| kn.env.as_deref()).is_some_and(|e| is_secret_name(e, secret_env));
            Ok((k.clone(), if secret && !v.starts_with("<secret:") { seal(dir, v)? } else { v.clone() }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_is_only_in_the_owner_only_file_and_comes_back_at_launch() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().expect("tmp");
        let p = seal(d.path(), "hunter2").expect("seal");
        assert_eq!(p, "<secret:1>");
        assert_eq!(seal(d.path(), "hunter2").expect("again"), p, "the same value, the same placeholder");
        let mode = std::fs::metadata(d.path().join(FILE)).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(unseal(d.path(), "--api-key=<secret:1>").expect("unseal"), "--api-key=hunter2");
        assert!(unseal(d.path(), "<secret:9>").is_err(), "a missing secret is an error, never sent as the placeholder");
    }

    #[test]
    fn url_user_information_is_sealed_and_the_rest_kept() {
        let d = tempfile::tempdir().expect("tmp");
        let u = seal_url(d.path(), "https://me:pw@@host.example/org/m?x=1").expect("seal");
        assert_eq!(u, "https://<secret:1>@host.example/org/m?x=1");
        assert_eq!(unseal(d.path(), &u).expect("unseal"), "https://me:pw@@host.example/org/m?x=1");
        assert_eq!(seal_url(d.path(), "org/model@main").expect("plain"), "org/model@main");
        assert_eq!(seal_url(d.path(), "https://host/a@b").expect("no userinfo"), "https://host/a@b");
    }
}
