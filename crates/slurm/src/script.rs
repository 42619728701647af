//! The batch job servetune submits: a task script that runs the rendered launch command on each
//! node, and a batch script that starts it with `srun` and writes the job's own exit record.
//!
//! sbatch takes a script, so these are shell scripts; every word servetune did not write itself is
//! single-quoted, so no value a user gives (a model path, a knob) is ever parsed by a shell. The
//! only expansions are the job's own values that exist on the node at run time ([`RuntimeValue`]).

use std::collections::BTreeMap;
use std::path::Path;

/// A value known only inside the job on each node, put into a rendered word as a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeValue {
    /// This node's index in the job (`SLURM_NODEID`).
    NodeRank,
    /// Nodes in the job.
    Nnodes,
    /// The head node's address (NodeAddr of the first of the job's nodes): where rank 0 listens.
    Head,
    /// This node's own address (its NodeAddr): what a server on it binds.
    NodeAddr,
    /// The job id.
    JobId,
}

const MARK: char = '\u{1}';

impl RuntimeValue {
    /// Every runtime value.
    pub const ALL: [RuntimeValue; 5] = [Self::NodeRank, Self::Nnodes, Self::Head, Self::NodeAddr, Self::JobId];

    fn key(self) -> &'static str {
        match self {
            Self::NodeRank => "node_rank",
            Self::Nnodes => "nnodes",
            Self::Head => "head",
            Self::NodeAddr => "node_addr",
            Self::JobId => "job_id",
        }
    }

    fn var(self) -> &'static str {
        match self {
            Self::NodeRank => "SERVETUNE_NODE_RANK",
            Self::Nnodes => "SERVETUNE_NNODES",
            Self::Head => "SERVETUNE_HEAD",
            Self::NodeAddr => "SERVETUNE_NODE_ADDR",
            Self::JobId => "SLURM_JOB_ID",
        }
    }

    /// The marker a template placeholder is filled with; [`quote_word`] turns it into the
    /// node's value.
    pub fn marker(self) -> String {
        format!("{MARK}{}{MARK}", self.key())
    }

    /// The placeholder name (`node_rank`).
    pub fn placeholder(self) -> &'static str {
        self.key()
    }
}

/// A rendered word for people (events, fingerprints): runtime markers as `{node_rank}`.
pub fn display_word(w: &str) -> String {
    RuntimeValue::ALL.iter().fold(w.to_string(), |acc, v| acc.replace(&v.marker(), &format!("{{{}}}", v.placeholder())))
}

/// One word for a shell: single-quoted, with runtime markers as double-quoted expansions.
pub fn quote_word(w: &str) -> String {
    let mut out = String::new();
    let mut lit = String::new();
    let flush = |lit: &mut String, out: &mut String| {
        if !lit.is_empty() {
            out.push('\'');
            out.push_str(&lit.replace('\'', "'\\''"));
            out.push('\'');
            lit.clear();
        }
    };
    let mut rest = w;
    while !rest.is_empty() {
        let hit = RuntimeValue::ALL.iter().find_map(|v| rest.strip_prefix(&v.marker()).map(|r| (*v, r)));
        if let Some((v, r)) = hit {
            flush(&mut lit, &mut out);
            out.push_str(&format!("\"${{{}}}\"", v.var()));
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            lit.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    flush(&mut lit, &mut out);
    if out.is_empty() {
        out.push_str("''");
    }
    out
}

/// The two scripts of one experiment's job.
#[derive(Debug, Clone)]
pub struct BatchScript {
    /// The launch command, rendered (runtime markers allowed).
    pub argv: Vec<String>,
    /// Variables for the server.
    pub env: BTreeMap<String, String>,
    /// Where each node appends one line about itself (the fingerprint's node list).
    pub nodes_file: String,
    /// Where the batch script writes its exit code.
    pub exit_file: String,
    /// srun's per-node output pattern (`%n` is the node's index).
    pub node_log_pattern: String,
    /// The task script's path (for the batch script's srun line).
    pub task_path: String,
}

fn valid_env_name(k: &str) -> bool {
    !k.is_empty() && !k.starts_with(|c: char| c.is_ascii_digit()) && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl BatchScript {
    /// The script each node runs: its place in the job, one line in the nodes file, then `exec`.
    pub fn task_script(&self) -> std::result::Result<String, String> {
        let mut s = String::from("#!/bin/bash\n# Written by servetune: one node's part of an experiment. Every word is quoted.\nset -u\n");
        s.push_str("SERVETUNE_NODE_RANK=\"${SLURM_NODEID:?not inside a Slurm step}\"\n");
        s.push_str("SERVETUNE_NNODES=\"${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}\"\n");
        // A node's address is its NodeAddr (how the controller reaches it), else its host name.
        s.push_str("addr_of() { scontrol show node \"$1\" -o 2>/dev/null | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1; }\n");
        s.push_str("SERVETUNE_NODE=\"${SLURMD_NODENAME:-$(hostname)}\"\n");
        s.push_str("SERVETUNE_NODE_ADDR=\"$(addr_of \"$SERVETUNE_NODE\")\"\n");
        s.push_str("SERVETUNE_NODE_ADDR=\"${SERVETUNE_NODE_ADDR:-$(hostname)}\"\n");
        s.push_str("first=\"$(scontrol show hostnames \"${SLURM_JOB_NODELIST:-}\" 2>/dev/null | head -n 1)\"\n");
        s.push_str("SERVETUNE_HEAD=\"$(addr_of \"${first:-$SERVETUNE_NODE}\")\"\n");
        s.push_str("SERVETUNE_HEAD=\"${SERVETUNE_HEAD:-$SERVETUNE_NODE_ADDR}\"\n");
        s.push_str(&format!(
            "printf 'node=%s host=%s addr=%s rank=%s nnodes=%s head=%s kernel=%s\\n' \"$SERVETUNE_NODE\" \"$(hostname)\" \"$SERVETUNE_NODE_ADDR\" \"$SERVETUNE_NODE_RANK\" \"$SERVETUNE_NNODES\" \"$SERVETUNE_HEAD\" \"$(uname -r)\" >> {}\n",
            quote_word(&self.nodes_file)
        ));
        for (k, v) in &self.env {
            if !valid_env_name(k) {
                return Err(format!("environment variable name {k:?} is not a shell name (letters, digits, _)"));
            }
            s.push_str(&format!("export {k}={}\n", quote_word(v)));
        }
        let words: Vec<String> = self.argv.iter().map(|w| quote_word(w)).collect();
        s.push_str(&format!("exec {}\n", words.join(" ")));
        Ok(s)
    }

    /// The batch script: srun the task on every node, then write the exit record (also on SIGTERM,
    /// which `scancel` sends first), so a job's end is known without accounting storage.
    pub fn batch_script(&self) -> String {
        let exit = quote_word(&self.exit_file);
        format!(
            "#!/bin/bash\n# Written by servetune: an experiment's batch job. Every word is quoted.\n\
             record() {{ printf '%s\\n' \"$1\" > {exit}.tmp && mv -f {exit}.tmp {exit}; }}\n\
             trap 'record 143; exit 143' TERM\n\
             trap 'record 130; exit 130' INT\n\
             echo \"servetune: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n\
             srun --kill-on-bad-exit=1 --ntasks-per-node=1 --output={} /bin/bash {} &\n\
             wait $!\n\
             rc=$?\n\
             record \"$rc\"\n\
             exit \"$rc\"\n",
            quote_word(&self.node_log_pattern),
            quote_word(&self.task_path)
        )
    }

    /// Writes both scripts (`task_path` and `batch`), executable.
    pub fn write(&self, batch: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let task = self.task_script().map_err(std::io::Error::other)?;
        std::fs::write(&self.task_path, task)?;
        std::fs::write(batch, self.batch_script())?;
        for p in [Path::new(&self.task_path), batch] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_single_quoted_and_markers_become_the_nodes_values() {
        assert_eq!(quote_word("plain"), "'plain'");
        assert_eq!(quote_word("it's"), "'it'\\''s'");
        assert_eq!(quote_word(""), "''");
        assert_eq!(quote_word("$(touch /tmp/x)"), "'$(touch /tmp/x)'");
        let w = format!("{}:5000", RuntimeValue::Head.marker());
        assert_eq!(quote_word(&w), "\"${SERVETUNE_HEAD}\"':5000'");
        assert_eq!(quote_word(&RuntimeValue::NodeRank.marker()), "\"${SERVETUNE_NODE_RANK}\"");
        assert_eq!(display_word(&w), "{head}:5000");
    }

    #[test]
    fn a_hostile_value_reaches_the_program_as_one_literal_word() {
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("argv");
        let evil = "a b'$(touch pwned)`id`;\"c\"";
        let b = BatchScript {
            argv: vec!["/bin/sh".into(), "-c".into(), "printf '%s\\n' \"$@\" > \"$0\"".into(), out.display().to_string(), evil.into()],
            env: BTreeMap::from([("X".to_string(), "v w".to_string())]),
            nodes_file: dir.path().join("nodes").display().to_string(),
            exit_file: String::new(),
            node_log_pattern: String::new(),
            task_path: dir.path().join("task.sh").display().to_string(),
        };
        std::fs::write(&b.task_path, b.task_script().expect("script")).expect("write");
        let st = std::process::Command::new("/bin/bash")
            .arg(&b.task_path)
            .current_dir(dir.path())
            .env("SLURM_NODEID", "0")
            .env("SLURM_JOB_NUM_NODES", "1")
            .env("SLURM_JOB_NODELIST", "n1")
            .status()
            .expect("bash");
        assert!(st.success());
        assert_eq!(std::fs::read_to_string(&out).expect("argv file"), format!("{evil}\n"));
        assert!(!dir.path().join("pwned").exists());
        let nodes = std::fs::read_to_string(dir.path().join("nodes")).expect("nodes");
        assert!(nodes.contains("rank=0 nnodes=1"), "{nodes}");
        let bad = BatchScript { env: BTreeMap::from([("A;B".to_string(), "1".to_string())]), ..b };
        assert!(bad.task_script().is_err());
    }
}
