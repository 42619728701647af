//! Help texts and messages that point to the next command: ambiguous GPU names list only their
//! candidates, `plan --help` lists the GPU catalog, `fabric` without a GPU offers the simulated
//! backend, and `campaign init` takes the checkpoint's published format as `plan` does. (That every
//! flag of every command has help text is checked on clap's command tree, in
//! `crates/cli/src/completions.rs`.)

use crate::common::run;

#[test]
fn an_ambiguous_gpu_name_lists_only_the_gpus_it_fits() {
    let (code, _, err) = run(&["plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("h100-sxm, h100-pcie, h100-nvl"), "{err}");
    assert!(!err.contains("rtx-pro-6000-se") && !err.contains("mi355x"), "the whole catalog is listed: {err}");
}

#[test]
fn plan_help_lists_the_gpu_catalog() {
    let (code, out, err) = run(&["plan", "--help"]);
    assert_eq!(code, 0, "{err}");
    for gpu in ["rtx-pro-6000-se", "h100-sxm", "gh200-144gb", "b200", "mi355x"] {
        assert!(out.contains(gpu), "{gpu} missing from plan --help");
    }
}

#[test]
fn fabric_without_a_gpu_suggests_the_simulated_backend() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine: the measurement runs
    }
    for cmd in ["p2p", "allreduce"] {
        let (code, _, err) = run(&["fabric", cmd]);
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(err.contains("no NVIDIA driver found") && err.contains("--backend sim"), "{cmd}: {err}");
    }
}

/// The `quant` and catalog model a campaign's journal recorded.
fn journal_quant(dir: &std::path::Path) -> (String, Option<String>) {
    let c = rusqlite::Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("journal");
    let settings: String = c.query_row("SELECT settings FROM campaign", [], |r| r.get(0)).expect("settings");
    let v: serde_json::Value = serde_json::from_str(&settings).expect("settings are JSON");
    (v["quant"].as_str().expect("quant").to_string(), v["catalog_model"].as_str().map(str::to_string))
}

#[test]
fn campaign_init_takes_the_published_checkpoint_format_unless_told() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../probe/tests/fixtures/proxmox-lxc-8gpu");
    let tmp = tempfile::tempdir().expect("tmp");
    // `campaign init` into a directory of its own, with the flags `extra` adds.
    let init = |name: &str, extra: Vec<&str>| {
        let dir = tmp.path().join(name);
        let d = dir.to_str().expect("utf-8 path").to_string();
        let mut args = vec!["campaign", "init", &d, "--engine", "sim", "--goal", "output_tok_s>=1000", "--probe-root", fixture];
        args.extend(extra);
        (run(&args), dir)
    };
    for (name, extra, want, catalog) in [
        ("catalog", vec!["--model", "deepseek-v3"], "fp8", "deepseek-v3"),
        ("path", vec!["--model", "/models/DeepSeek-V3", "--catalog-model", "deepseek-v3"], "fp8", "deepseek-v3"),
        ("dense", vec!["--model", "llama-3.1-8b"], "bf16", "llama-3.1-8b"),
        ("told", vec!["--model", "deepseek-v3", "--quant", "nvfp4"], "nvfp4", "deepseek-v3"),
        // A listed checkpoint's Hugging Face repository, as the engine takes it, names the catalog
        // model and the checkpoint's own format (glm-5's default is FP8, this one BF16).
        ("repository", vec!["--model", "zai-org/GLM-5"], "bf16", "glm-5"),
        ("repository-case", vec!["--model", "qwen/qwen3-30b-a3b-fp8"], "fp8", "qwen3-30b-a3b"),
        ("path-and-repository", vec!["--model", "/models/glm", "--catalog-model", "zai-org/GLM-5"], "bf16", "glm-5"),
        // --quant in another letter case is stored under its canonical name (the plan step parses
        // the journal's value again; "FP8" there lost every prediction), and so is fp16.
        ("told-upper-case", vec!["--model", "deepseek-v3", "--quant", "NVFP4"], "nvfp4", "deepseek-v3"),
        ("told-fp16", vec!["--model", "llama-3.1-8b", "--quant", "FP16"], "bf16", "llama-3.1-8b"),
        ("agrees-upper-case", vec!["--model", "zai-org/GLM-5-FP8", "--quant", "Fp8"], "fp8", "glm-5"),
    ] {
        let ((code, out, err), dir) = init(name, extra);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert_eq!(journal_quant(&dir), (want.to_string(), Some(catalog.to_string())), "{name}");
    }
    // A --quant of another format than the named checkpoint's is refused, naming the flag, and so
    // are two flags naming different checkpoints.
    for (name, extra, want) in [
        (
            "conflict-model",
            vec!["--model", "zai-org/GLM-5-FP8", "--quant", "nvfp4"],
            "--model zai-org/GLM-5-FP8 is the fp8 checkpoint of glm-5, but --quant nvfp4",
        ),
        (
            "conflict-catalog",
            vec!["--model", "/models/glm", "--catalog-model", "zai-org/GLM-5-FP8", "--quant", "bf16"],
            "--catalog-model zai-org/GLM-5-FP8 is the fp8 checkpoint of glm-5, but --quant bf16",
        ),
        (
            "conflict-flags",
            vec!["--model", "zai-org/GLM-5", "--catalog-model", "zai-org/GLM-5-FP8"],
            "--model zai-org/GLM-5 is the bf16 checkpoint of glm-5 but --catalog-model zai-org/GLM-5-FP8 is the fp8 checkpoint",
        ),
        ("conflict-models", vec!["--model", "Qwen/Qwen3-30B-A3B-FP8", "--catalog-model", "deepseek-v3"], "they must name the same model"),
        // An unknown format is refused before anything is written, with the formats known.
        (
            "unknown-quant",
            vec!["--model", "deepseek-v3", "--quant", "fp9"],
            "--quant \"fp9\" is unknown; known: bf16, fp8, nvfp4, mxfp4, int4",
        ),
        ("unknown-quant-path", vec!["--model", "/models/x", "--quant", "AWQ"], "--quant \"AWQ\" is unknown"),
        (
            "conflict-upper-case",
            vec!["--model", "zai-org/GLM-5-FP8", "--quant", "NVFP4"],
            "--model zai-org/GLM-5-FP8 is the fp8 checkpoint of glm-5, but --quant NVFP4 asks for another format",
        ),
    ] {
        let ((code, _, err), dir) = init(name, extra);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(!dir.exists(), "{name}: a refused init creates no campaign directory");
    }
    let (_, help, _) = run(&["campaign", "init", "--help"]);
    assert!(help.contains("published checkpoint"), "campaign init --help says where --quant's default comes from");
}
