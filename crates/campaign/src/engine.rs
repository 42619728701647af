//! Engines: launch templates (argv with placeholders, never a shell string), their knobs with
//! domains, health and readiness endpoints, version query and log patterns. The built-ins live in
//! `engines.toml`, parsed by the same code as a user's `--engines FILE`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{CampaignError, Result};

/// Values the campaign fills in, beside the knobs.
pub const CONTEXT_PLACEHOLDERS: &[&str] = &[
    "model",
    "host",
    "port",
    "servetune",
    "gpu",
    "gpus",
    "link",
    "quant",
    "input_len",
    "output_len",
    "node_rank",
    "nnodes",
    "head",
    "dist_port",
];

/// A knob's allowed values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// An integer in [min, max].
    Int {
        /// The least value.
        min: i64,
        /// The greatest value.
        max: i64,
    },
    /// A number in [min, max].
    Float {
        /// The least value.
        min: f64,
        /// The greatest value.
        max: f64,
    },
    /// One of these words.
    Choice(Vec<String>),
    /// Any text (a path, an interpreter).
    Text,
}

impl Domain {
    /// Checks `v`; the error says what is allowed.
    fn check(&self, v: &str) -> std::result::Result<(), String> {
        match self {
            Domain::Int { min, max } => match v.parse::<i64>() {
                Ok(n) if n >= *min && n <= *max => Ok(()),
                _ => Err(format!("an integer from {min} to {max}")),
            },
            Domain::Float { min, max } => match v.parse::<f64>() {
                Ok(x) if x >= *min && x <= *max => Ok(()),
                _ => Err(format!("a number from {min} to {max}")),
            },
            Domain::Choice(c) if c.iter().any(|x| x == v) => Ok(()),
            Domain::Choice(c) => Err(format!("one of {}", c.join(", "))),
            Domain::Text => Ok(()),
        }
    }

    /// Checks the domain itself: integer bounds in order, float bounds finite and in order, a
    /// choice with at least one word. The error says what to write instead.
    fn validate(&self) -> std::result::Result<(), String> {
        match self {
            Domain::Int { min, max } if min > max => {
                Err(format!("domain int {{ min = {min}, max = {max} }} is empty: min must be at most max"))
            }
            Domain::Float { min, max } if !(min.is_finite() && max.is_finite()) => {
                Err(format!("domain float {{ min = {min}, max = {max} }}: the bounds must be finite numbers"))
            }
            Domain::Float { min, max } if min > max => {
                Err(format!("domain float {{ min = {min}, max = {max} }} is empty: min must be at most max"))
            }
            Domain::Choice(c) if c.is_empty() => Err("domain choice = [] allows nothing: list the allowed words".into()),
            _ => Ok(()),
        }
    }

    /// The domain in words.
    pub fn describe(&self) -> String {
        match self {
            Domain::Int { min, max } => format!("int {min}..{max}"),
            Domain::Float { min, max } => format!("float {min}..{max}"),
            Domain::Choice(c) => c.join("|"),
            Domain::Text => "text".into(),
        }
    }
}

/// A setting the planner or a person may turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knob {
    /// The knob's name (`--set NAME=VALUE`).
    pub name: String,
    /// What it sets, in words.
    #[serde(default)]
    pub help: String,
    /// The values it takes.
    pub domain: Domain,
    /// Used when no value is given; may hold context placeholders (`{gpus}`).
    #[serde(default)]
    pub default: Option<String>,
    /// Words appended to argv when the knob has a value (`{value}` is the value).
    #[serde(default)]
    pub args: Vec<String>,
    /// An environment variable set to the value.
    #[serde(default)]
    pub env: Option<String>,
}

/// How to ask the engine its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionQuery {
    /// GET `path` on the running server and read the JSON `field`.
    Http {
        /// The path to GET.
        path: String,
        /// The JSON field holding the version.
        field: String,
    },
    /// Run this argv (placeholders allowed) and take the first line it prints.
    Command(Vec<String>),
}

/// What a log line means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSignal {
    /// The fused-MoE kernels run with untuned default configs.
    MoeDefaultConfig,
    /// A tuned MoE kernel configuration file was loaded (the line names it).
    MoeConfigLoaded,
}

/// A log line pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogPattern {
    /// A substring of a log line.
    pub contains: String,
    /// What the line means.
    pub signal: LogSignal,
}

/// A launch template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineTemplate {
    /// The name `--engine` takes.
    pub name: String,
    /// What it launches, in words.
    #[serde(default)]
    pub description: String,
    /// The launch command's words, with placeholders (`{model}`, `{port}`, knobs' `{value}`).
    pub argv: Vec<String>,
    /// Words after the knobs' args (for flags that swallow the rest, like sim's --from-plan).
    #[serde(default)]
    pub tail: Vec<String>,
    /// Words added when an experiment spans several nodes (Slurm executor, --nodes > 1), e.g.
    /// sglang's `--nnodes {nnodes} --node-rank {node_rank} --dist-init-addr {head}:{dist_port}`.
    /// A template without them cannot run on several nodes.
    #[serde(default)]
    pub multi_node: Vec<String>,
    /// Environment variables set for the server (placeholders allowed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Path that answers 200 once the server is up.
    pub health: String,
    /// OpenAI completions path for the one-token readiness generation and the benchmark.
    pub generate: String,
    /// The Prometheus metrics path, when the engine serves one.
    #[serde(default)]
    pub metrics: Option<String>,
    /// How to ask the engine its version.
    #[serde(default)]
    pub version: Option<VersionQuery>,
    /// How long the server may take to become ready, seconds.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout_s: u64,
    /// The knobs a campaign may set.
    #[serde(default)]
    pub knobs: Vec<Knob>,
    /// Log lines that mean something to the planner.
    #[serde(default)]
    pub logs: Vec<LogPattern>,
}

/// Which serving engine a template launches: a built-in one, or another (a template of the
/// user's own), for the few places that say something engine-specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// SGLang (`sglang`).
    Sglang,
    /// vLLM (`vllm`).
    Vllm,
    /// llama.cpp's server (`llama-server`).
    LlamaServer,
    /// llama-cpp-python's server (`llama-cpp-python`).
    LlamaCppPython,
    /// servetune's simulator (`sim`).
    Sim,
    /// A template of the user's own.
    Other,
}

impl EngineKind {
    /// The kind of the built-in template named `name`; [`EngineKind::Other`] for any other name.
    pub fn of(name: &str) -> Self {
        match name {
            "sglang" => EngineKind::Sglang,
            "vllm" => EngineKind::Vllm,
            "llama-server" => EngineKind::LlamaServer,
            "llama-cpp-python" => EngineKind::LlamaCppPython,
            "sim" => EngineKind::Sim,
            _ => EngineKind::Other,
        }
    }
}

fn default_ready_timeout() -> u64 {
    600
}

/// The longest `ready_timeout_s` a template may ask for: a week. Loading the largest models
/// takes under an hour; more than this is a typo (and a deadline that far ahead is no deadline).
pub const MAX_READY_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// The most an `--engines` file may hold (the built-ins are a few KB).
pub const MAX_ENGINE_FILE: u64 = 4 << 20;

/// An environment variable name a shell and `execve` both take: a letter or `_`, then letters,
/// digits and `_`.
fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A request path the executor writes into its request line: starts with `/`, no spaces or
/// control characters (which would end the line early or smuggle a header).
fn is_request_path(s: &str) -> bool {
    s.starts_with('/') && s.bytes().all(|c| c.is_ascii_graphic())
}

#[derive(Debug, Deserialize)]
struct EngineFile {
    #[serde(default)]
    engine: Vec<EngineTemplate>,
}

/// What the campaign fills in.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Placeholder name to value.
    pub values: BTreeMap<String, String>,
}

/// A launch command, ready to spawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rendered {
    /// The command's words, placeholders filled.
    pub argv: Vec<String>,
    /// Variables set for the server (template env and env knobs).
    pub env: BTreeMap<String, String>,
    /// Every knob's effective value (given or default).
    pub knobs: BTreeMap<String, String>,
}

/// `{name}` placeholders in `s`, or an error naming an unclosed brace.
fn placeholders(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        let j = after.find('}').ok_or_else(|| format!("unclosed '{{' in {s:?}"))?;
        out.push(after[..j].to_string());
        rest = &after[j + 1..];
    }
    Ok(out)
}

fn fill(s: &str, vals: &BTreeMap<String, String>) -> std::result::Result<String, String> {
    let mut out = s.to_string();
    for p in placeholders(s)? {
        let v = vals.get(&p).ok_or_else(|| format!("{{{p}}} has no value"))?;
        out = out.replace(&format!("{{{p}}}"), v);
    }
    Ok(out)
}

/// Why knob `name`'s value `v`, filled from its default `d`, is refused: which placeholders made
/// it, and how to set the knob instead.
fn default_outside(name: &str, v: &str, d: &str, vals: &BTreeMap<String, String>, want: &str) -> String {
    let from: Vec<String> = placeholders(d)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| vals.get(p).map(|x| (p, x)))
        .map(|(p, x)| match p.as_str() {
            "gpus" => format!("{{gpus}} is {x}, the GPU count (--gpus, else the probe's)"),
            _ => format!("{{{p}}} is {x}"),
        })
        .collect();
    let why = if from.is_empty() { String::new() } else { format!(", where {}", from.join(", ")) };
    format!("knob {name}={v} is outside its domain: the template's default for it is {d}{why}; give {want} with --set {name}=VALUE")
}

impl EngineTemplate {
    /// Which engine this template launches.
    pub fn kind(&self) -> EngineKind {
        EngineKind::of(&self.name)
    }

    /// Checks every placeholder and default; the error names the engine and the fix.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| CampaignError::Input(format!("engine {:?}: {m}", self.name));
        if self.argv.is_empty() {
            return Err(bad("argv is empty: give the program and its arguments as a list of words".into()));
        }
        let knob_names: Vec<&str> = self.knobs.iter().map(|k| k.name.as_str()).collect();
        let known = |extra: &[&str]| -> Vec<String> {
            CONTEXT_PLACEHOLDERS.iter().chain(knob_names.iter()).chain(extra).map(|s| s.to_string()).collect()
        };
        let check_words = |what: &str, words: &[String], extra: &[&str]| -> Result<()> {
            let known = known(extra);
            for (i, w) in words.iter().enumerate() {
                for p in placeholders(w).map_err(|e| bad(format!("{what}[{i}]: {e}")))? {
                    if !known.contains(&p) {
                        return Err(bad(format!("unknown placeholder {{{p}}} in {what}[{i}] {w:?}; known: {}", known.join(", "))));
                    }
                    if let Some(k) = self.knobs.iter().find(|k| k.name == p) {
                        if k.default.is_none() && what != "knob args" {
                            return Err(bad(format!("{{{p}}} in {what}[{i}] is a knob without a default: give knob {p} a default, or move it to the knob's args")));
                        }
                    }
                }
            }
            Ok(())
        };
        self.validate_settings(&bad)?;
        check_words("argv", &self.argv, &[])?;
        check_words("tail", &self.tail, &[])?;
        check_words("multi_node", &self.multi_node, &[])?;
        let env_vals: Vec<String> = self.env.values().cloned().collect();
        check_words("env", &env_vals, &[])?;
        if let Some(VersionQuery::Command(c)) = &self.version {
            check_words("version", c, &[])?;
        }
        for k in &self.knobs {
            check_words("knob args", &k.args, &["value"])?;
            if let Some(d) = &k.default {
                for p in placeholders(d).map_err(|e| bad(format!("knob {}: {e}", k.name)))? {
                    if !CONTEXT_PLACEHOLDERS.contains(&p.as_str()) {
                        return Err(bad(format!(
                            "knob {} default {d:?}: unknown placeholder {{{p}}}; defaults may use {}",
                            k.name,
                            CONTEXT_PLACEHOLDERS.join(", ")
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// The template's plain settings: paths, the readiness time, environment names, knob names
    /// and domains.
    fn validate_settings(&self, bad: &dyn Fn(String) -> CampaignError) -> Result<()> {
        for (what, path) in [("health", Some(&self.health)), ("generate", Some(&self.generate)), ("metrics", self.metrics.as_ref())] {
            if let Some(p) = path.filter(|p| !is_request_path(p)) {
                return Err(bad(format!("{what} = {p:?} is not a request path: give a path that starts with / and has no spaces or control characters, e.g. \"/health\"")));
            }
        }
        if let Some(VersionQuery::Http { path, .. }) = &self.version {
            if !is_request_path(path) {
                return Err(bad(format!("version http path = {path:?} is not a request path: give a path that starts with / and has no spaces, e.g. \"/version\"")));
            }
        }
        if !(1..=MAX_READY_TIMEOUT_S).contains(&self.ready_timeout_s) {
            return Err(bad(format!(
                "ready_timeout_s = {} is out of range: give seconds from 1 to {MAX_READY_TIMEOUT_S} (a week)",
                self.ready_timeout_s
            )));
        }
        if let Some(v) = self.env.keys().find(|v| !is_env_name(v)) {
            return Err(bad(format!(
                "env {v:?} is not an environment variable name: use letters, digits and _, not starting with a digit (e.g. NCCL_ALGO)"
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for k in &self.knobs {
            if !seen.insert(k.name.as_str()) {
                return Err(bad(format!("knob {} is defined twice: keep one", k.name)));
            }
            if k.name.is_empty() || k.name.contains(['{', '}']) || k.name.chars().any(char::is_whitespace) {
                return Err(bad(format!("knob name {:?} cannot be a placeholder: use letters, digits and _ (e.g. max_running)", k.name)));
            }
            k.domain.validate().map_err(|m| bad(format!("knob {}: {m}", k.name)))?;
            if let Some(v) = k.env.as_deref().filter(|v| !is_env_name(v)) {
                return Err(bad(format!("knob {}: env = {v:?} is not an environment variable name: use letters, digits and _, not starting with a digit (e.g. NCCL_ALGO)", k.name)));
            }
        }
        Ok(())
    }

    /// The knob `name`.
    pub fn knob(&self, name: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.name == name)
    }

    /// Checks the knob values a step or a person gives.
    pub fn check_knobs(&self, given: &BTreeMap<String, String>) -> Result<()> {
        for (name, v) in given {
            let k = self.knob(name).ok_or_else(|| {
                let names: Vec<&str> = self.knobs.iter().map(|k| k.name.as_str()).collect();
                CampaignError::Input(format!("engine {} has no knob {name:?}; its knobs: {}", self.name, names.join(", ")))
            })?;
            k.domain.check(v).map_err(|want| {
                CampaignError::Input(format!("knob {name}={v} is outside its domain: engine {} takes {want}", self.name))
            })?;
        }
        Ok(())
    }

    /// Renders argv and env for `given` knob values in `ctx`.
    pub fn render(&self, ctx: &Context, given: &BTreeMap<String, String>) -> Result<Rendered> {
        self.validate()?;
        self.check_knobs(given)?;
        let bad = |m: String| CampaignError::Input(format!("engine {}: {m}", self.name));
        let mut knobs = BTreeMap::new();
        for k in &self.knobs {
            let v = match (given.get(&k.name), &k.default) {
                (Some(v), _) => v.clone(),
                (None, Some(d)) => {
                    let v = fill(d, &ctx.values).map_err(|e| bad(format!("knob {} default: {e}", k.name)))?;
                    // A default filled from the box (tp = {gpus}) is a value the user never set: say where it came from.
                    k.domain.check(&v).map_err(|want| bad(default_outside(&k.name, &v, d, &ctx.values, &want)))?;
                    v
                }
                (None, None) => continue,
            };
            k.domain.check(&v).map_err(|want| bad(format!("knob {}={v} is outside its domain: give {want}", k.name)))?;
            knobs.insert(k.name.clone(), v);
        }
        let mut vals = ctx.values.clone();
        vals.extend(knobs.clone());
        let words = |ws: &[String], vals: &BTreeMap<String, String>| -> Result<Vec<String>> {
            ws.iter().map(|w| fill(w, vals).map_err(bad)).collect()
        };
        let mut argv = words(&self.argv, &vals)?;
        let mut env = BTreeMap::new();
        for (k, v) in &self.env {
            env.insert(k.clone(), fill(v, &vals).map_err(bad)?);
        }
        for k in &self.knobs {
            let Some(v) = knobs.get(&k.name) else { continue };
            let mut kv = vals.clone();
            kv.insert("value".into(), v.clone());
            argv.extend(words(&k.args, &kv)?);
            if let Some(var) = &k.env {
                env.insert(var.clone(), v.clone());
            }
        }
        // Several nodes: the context's node count is then the job's, not "1".
        if ctx.values.get("nnodes").is_some_and(|n| n != "1") {
            argv.extend(words(&self.multi_node, &vals)?);
        }
        argv.extend(words(&self.tail, &vals)?);
        Ok(Rendered { argv, env, knobs })
    }
}

/// Parses a TOML file of `[[engine]]` tables and validates each.
pub fn parse(text: &str, source: &str) -> Result<Vec<EngineTemplate>> {
    let f: EngineFile = toml::from_str(text).map_err(|e| {
        CampaignError::Input(format!("{source}: not an engine file ({e}); see servetune campaign engines --help for the format"))
    })?;
    for (i, e) in f.engine.iter().enumerate() {
        if e.name.trim().is_empty() || e.name.chars().any(char::is_control) {
            return Err(CampaignError::Input(format!(
                "{source}: engine {} has the name {:?}: give it a name of printable characters (campaign --engine NAME picks it)",
                i + 1,
                e.name
            )));
        }
        if f.engine[..i].iter().any(|o| o.name == e.name) {
            return Err(CampaignError::Input(format!(
                "{source}: two [[engine]] tables are named {:?}: which one --engine {:?} means is unknown; rename one",
                e.name, e.name
            )));
        }
        e.validate()?;
    }
    Ok(f.engine)
}

/// The built-in templates.
pub fn builtins() -> Vec<EngineTemplate> {
    // The file is part of the crate and checked by a test; an error here is a bug of the build.
    parse(include_str!("engines.toml"), "built-in engines.toml").unwrap_or_default()
}

/// Built-ins, then the user's file (a user template replaces a built-in of the same name).
pub fn all(user: Option<&Path>) -> Result<Vec<EngineTemplate>> {
    let mut out = builtins();
    if let Some(p) = user {
        let text = servetune_io::read_text(p, &format!("--engines {}", p.display()), MAX_ENGINE_FILE)
            .map_err(|e| CampaignError::Input(e.to_string()))?;
        for t in parse(&text, &format!("--engines {}", p.display()))? {
            out.retain(|b| b.name != t.name);
            out.push(t);
        }
    }
    Ok(out)
}

/// The template `name` among `all`.
pub fn find(all: &[EngineTemplate], name: &str) -> Result<EngineTemplate> {
    all.iter().find(|e| e.name == name).cloned().ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
        CampaignError::Input(format!("--engine {name:?} is unknown; known: {} (or add one with --engines FILE)", names.join(", ")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        let mut values = BTreeMap::new();
        for (k, v) in [("model", "m.gguf"), ("host", "127.0.0.1"), ("port", "8001"), ("gpus", "8"), ("servetune", "/bin/st")] {
            values.insert(k.to_string(), v.to_string());
        }
        Context { values }
    }

    #[test]
    fn an_engine_without_a_printable_name_or_named_twice_is_refused() {
        let table =
            |name: &str| format!("[[engine]]\nname = \"{name}\"\nargv = [\"srv\"]\nhealth = \"/h\"\ngenerate = \"/v1/completions\"\n");
        for name in ["", "  ", "a\\u001b[31m"] {
            let e = parse(&table(name), "e.toml").expect_err(name);
            assert!(e.to_string().contains("give it a name of printable characters"), "{e}");
        }
        let e = parse(&(table("x") + &table("x")), "e.toml").expect_err("twice");
        assert!(e.to_string().contains("two [[engine]] tables are named \"x\""), "{e}");
        assert_eq!(parse(&(table("x") + &table("y")), "e.toml").expect("two names").len(), 2);
    }

    #[test]
    fn builtins_parse_and_cover_the_engines() {
        let b = parse(include_str!("engines.toml"), "engines.toml").expect("built-ins parse");
        let names: Vec<&str> = b.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["sglang", "vllm", "llama-server", "llama-cpp-python", "sim"]);
    }

    #[test]
    fn render_fills_placeholders_defaults_and_knob_args() {
        let e = find(&builtins(), "sglang").expect("sglang");
        let r =
            e.render(&ctx(), &BTreeMap::from([("max_running".into(), "128".into()), ("nccl_algo".into(), "Ring".into())])).expect("render");
        assert_eq!(
            r.argv,
            [
                "python3",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "m.gguf",
                "--host",
                "127.0.0.1",
                "--port",
                "8001",
                "--tp-size",
                "8",
                "--enable-metrics",
                "--max-running-requests",
                "128"
            ]
        );
        assert_eq!(r.env.get("NCCL_ALGO").map(String::as_str), Some("Ring"));
        assert_eq!(r.knobs.get("tp").map(String::as_str), Some("8"));
    }

    #[test]
    fn unknown_placeholder_and_out_of_domain_are_named() {
        let text = "[[engine]]\nname = \"x\"\nargv = [\"srv\", \"--p\", \"{prot}\"]\nhealth = \"/h\"\ngenerate = \"/v1/completions\"\n";
        let e = parse(text, "f.toml").expect_err("unknown placeholder");
        assert!(matches!(&e, CampaignError::Input(m) if m.contains("{prot}") && m.contains("argv[2]")), "{e}");
        let sg = find(&builtins(), "sglang").expect("sglang");
        let e = sg.render(&ctx(), &BTreeMap::from([("mem_fraction".into(), "1.5".into())])).expect_err("domain");
        assert!(matches!(&e, CampaignError::Input(m) if m.contains("mem_fraction=1.5") && m.contains("0.1 to 0.98")), "{e}");
        let e = sg.render(&ctx(), &BTreeMap::from([("bogus".into(), "1".into())])).expect_err("knob");
        assert!(matches!(&e, CampaignError::Input(m) if m.contains("no knob \"bogus\"")), "{e}");
    }

    /// tp defaults to {gpus}: a box with more GPUs than the knob allows is told where the value
    /// came from and how to set it, not blamed for a knob the user never set.
    #[test]
    fn a_default_outside_the_domain_names_the_gpu_count_it_came_from_and_set() {
        let sim = find(&builtins(), "sim").expect("sim");
        let mut c = ctx();
        c.values.insert("gpus".into(), "100".into());
        let e = sim.render(&c, &BTreeMap::new()).expect_err("tp=100");
        assert!(matches!(&e, CampaignError::Input(_)), "{e}");
        let m = e.to_string();
        assert!(m.contains("tp=100") && m.contains("{gpus} is 100, the GPU count") && m.contains("probe"), "{m}");
        assert!(m.contains("from 1 to 64") && m.contains("--set tp=VALUE"), "{m}");
    }

    fn one_knob(knob: &str) -> String {
        format!("[[engine]]\nname = \"x\"\nargv = [\"srv\"]\nhealth = \"/h\"\ngenerate = \"/v1/completions\"\nknobs = [{knob}]\n")
    }

    #[test]
    fn engine_files_with_empty_or_nan_domains_bad_env_names_or_bad_paths_are_refused_naming_the_knob_and_fix() {
        let cases = [
            (
                one_knob("{ name = \"tp\", domain = { int = { min = 8, max = 1 } } }"),
                "knob tp: domain int { min = 8, max = 1 } is empty: min must be at most max",
            ),
            (
                one_knob("{ name = \"f\", domain = { float = { min = nan, max = 1.0 } } }"),
                "knob f: domain float { min = NaN, max = 1 }: the bounds must be finite",
            ),
            (one_knob("{ name = \"f\", domain = { float = { min = 0.0, max = inf } } }"), "the bounds must be finite"),
            (one_knob("{ name = \"f\", domain = { float = { min = 2.0, max = 1.0 } } }"), "is empty: min must be at most max"),
            (one_knob("{ name = \"c\", domain = { choice = [] } }"), "knob c: domain choice = [] allows nothing"),
            (
                one_knob("{ name = \"a\", domain = \"text\", env = \"NCCL ALGO\" }"),
                "knob a: env = \"NCCL ALGO\" is not an environment variable name",
            ),
            (one_knob("{ name = \"a\", domain = \"text\", env = \"A=B\" }"), "env = \"A=B\" is not an environment variable name"),
            (one_knob("{ name = \"a\", domain = \"text\" }, { name = \"a\", domain = \"text\" }"), "knob a is defined twice"),
            (one_knob("").replace("knobs = []", "env = { \"1X\" = \"y\" }"), "env \"1X\" is not an environment variable name"),
            (one_knob("").replace("\"/h\"", "\"/h HTTP/1.1\\r\\nX: y\""), "health = \"/h HTTP/1.1\\r\\nX: y\" is not a request path"),
            (
                one_knob("").replace("knobs = []", "ready_timeout_s = 0"),
                "ready_timeout_s = 0 is out of range: give seconds from 1 to 604800",
            ),
        ];
        for (text, says) in cases {
            let e = parse(&text, "f.toml").expect_err(says);
            assert!(matches!(&e, CampaignError::Input(m) if m.starts_with("engine \"x\": ") && m.contains(says)), "{e}\n{text}");
        }
        parse(&one_knob("{ name = \"f\", domain = { float = { min = 0.5, max = 0.5 } }, env = \"_X1\" }"), "f.toml")
            .expect("a one-value domain is fine");
    }

    #[test]
    fn an_engines_file_that_is_a_device_is_refused_at_its_limit() {
        // An endless text stream (a FIFO a thread fills with spaces) stops at the limit; a binary
        // device at its first byte.
        let d = tempfile::tempdir().expect("tmp");
        let fifo = d.path().join("engines.toml");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        let q = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write as _;
            if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&q) {
                let spaces = vec![b' '; 1 << 16];
                while f.write_all(&spaces).is_ok() {}
            }
        });
        let e = all(Some(&fifo)).expect_err("endless");
        assert!(matches!(&e, CampaignError::Input(m) if m.contains("engines.toml: larger than 4 MiB")), "{e}");
        let e = all(Some(Path::new("/dev/zero"))).expect_err("binary");
        assert!(matches!(&e, CampaignError::Input(m) if m.starts_with("--engines /dev/zero: not UTF-8 text")), "{e}");
    }
}
