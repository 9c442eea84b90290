//! Every default stated once: `--help`, config.example.toml and docs/USAGE.md say the same
//! values, and those values are the code's constants. A default changed in one place and not
//! the others fails here, naming the document and the value.

use std::process::Command;

use slate::copy::tune::{DEFAULT_CHUNK, MAX_CHUNK, MAX_STREAMS, MIB, MIN_CHUNK, START_STREAMS};
use slate::copy::ADAPTIVE_MAX;
use slate::stores::limit::START;

fn help(cmd: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slate"))
        .args([cmd, "--help"])
        .output()
        .expect("slate --help");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).expect(path)
}

/// Text as one line: comment markers at line starts dropped, whitespace collapsed (a phrase
/// wrapped across lines is still found).
fn flat(text: &str) -> String {
    text.lines()
        .map(|l| l.trim_start().trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn help_config_example_and_usage_state_the_same_defaults() {
    let docs = [
        ("slate copy --help", flat(&help("copy"))),
        ("slate sync --help", flat(&help("sync"))),
        ("config.example.toml", flat(&file("config.example.toml"))),
        ("docs/USAGE.md", flat(&file("docs/USAGE.md"))),
    ];
    let serve = flat(&help("serve"));
    let mib = |b: u64| b / MIB;
    // (what, the documents it must be in, any of these spellings)
    let facts: Vec<(&str, Vec<&str>, Vec<String>)> = vec![
        (
            "objects in flight start",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec![format!("from {START}"), format!("start at {START}")],
        ),
        (
            "objects in flight ceiling",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec![format!("min({ADAPTIVE_MAX}, one per MiB of")],
        ),
        (
            "ceiling by open files",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec!["a quarter of the".into()],
        ),
        (
            "streams start",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec![
                format!("from {START_STREAMS}"),
                format!("start at {START_STREAMS}"),
                format!("{START_STREAMS} per object"),
            ],
        ),
        (
            "streams ceiling",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec![format!("at most {MAX_STREAMS}")],
        ),
        (
            "chunk sizes",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec![
                format!("{} to {} MiB", mib(MIN_CHUNK), mib(MAX_CHUNK)),
                format!("{}-{} MiB", mib(MIN_CHUNK), mib(MAX_CHUNK)),
                format!("{}–{} MiB", mib(MIN_CHUNK), mib(MAX_CHUNK)),
            ],
        ),
        (
            "chunk before measuring",
            vec!["slate copy --help", "docs/USAGE.md"],
            vec![format!("{} MiB until measured", mib(DEFAULT_CHUNK))],
        ),
        (
            "memory limit",
            vec!["slate copy --help", "config.example.toml", "docs/USAGE.md"],
            vec!["1GiB".into(), "1 GiB".into()],
        ),
        (
            "delete brake",
            vec!["slate sync --help", "config.example.toml", "docs/USAGE.md"],
            vec![
                "\"50%\"".into(),
                "default `50%`".into(),
                "default: 50%".into(),
                "[default: 50%]".into(),
                "else 50%]".into(),
            ],
        ),
        (
            "delete brake window",
            vec!["slate sync --help", "config.example.toml", "docs/USAGE.md"],
            vec![
                "[default: 10m]".into(),
                "\"10m\"".into(),
                "`10m`".into(),
                "10 minutes".into(),
            ],
        ),
        (
            "drift check",
            vec!["slate sync --help", "config.example.toml", "docs/USAGE.md"],
            vec![
                "86400".into(),
                "\"24h\"".into(),
                "default 24 h".into(),
                "24 h by default".into(),
            ],
        ),
        (
            "listener",
            vec!["config.example.toml", "docs/USAGE.md"],
            vec!["127.0.0.1:3030".into()],
        ),
    ];
    let mut wrong = Vec::new();
    for (what, wheres, spellings) in &facts {
        for (name, text) in docs.iter().filter(|(n, _)| wheres.contains(n)) {
            if !spellings.iter().any(|s| text.contains(s.as_str())) {
                wrong.push(format!("{name} does not state the {what} as {spellings:?}"));
            }
        }
    }
    assert!(
        serve.contains("127.0.0.1:3030"),
        "slate serve --help: {serve}"
    );
    // what the documents once said and the code never did
    let readme = flat(&file("README.md"));
    for (name, text) in docs.iter().chain([&("README.md", readme)]) {
        for stale in [
            "half the open-file",
            "half of the open-file",
            "streams are 1–16",
            "1-16 streams",
            "at most 16 streams",
        ] {
            if text.contains(stale) {
                wrong.push(format!("{name} still says \"{stale}\""));
            }
        }
    }
    assert!(wrong.is_empty(), "defaults disagree:\n{}", wrong.join("\n"));
}
