//! Keeps `manifests/` honest: parses every Kubernetes YAML document and the systemd unit, and
//! checks what would really break a deployment: one replica recreated, the same port in the
//! config, the container, the probes and the Service, a config that slate's own loader accepts
//! with its database on the volume, the config mounted where `--config` points, the image tag
//! equal to the crate version, the systemd unit running the same command, and credentials that
//! name only variables slate reads (the listener's token included). For the workers on
//! PostgreSQL (manifests/kubernetes/workers, slate@.service): several pods rolled, no volume,
//! SLATE_DB from a Secret, probes on slate's real routes, a PDB and an HPA that select them,
//! the HPA's metric a gauge slate exports, each systemd instance on its own port. No cluster,
//! no network.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Deserialize;
use serde_json::Value;

use slate::cli::{Cli, Command};
use slate::config::Config;
use slate::core::location::{Location, Scheme};
use slate::engine::daemon::EventSource;

const K8S: &str = "manifests/kubernetes";
const SYSTEMD: &str = "manifests/systemd";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    let p = repo(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// Every non-empty YAML document of `manifests/kubernetes/FILE`.
fn yaml_docs(file: &str) -> Vec<Value> {
    let rel = format!("{K8S}/{file}");
    let text = read(&rel);
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
        let v = Value::deserialize(doc)
            .unwrap_or_else(|e| panic!("{rel}: YAML document {i} does not parse: {e}"));
        if !v.is_null() {
            docs.push(v);
        }
    }
    assert!(!docs.is_empty(), "{rel}: holds no YAML document");
    docs
}

/// The value at a JSON pointer, or a panic naming the file and the pointer.
fn at<'a>(v: &'a Value, pointer: &str, file: &str) -> &'a Value {
    v.pointer(pointer)
        .unwrap_or_else(|| panic!("{file}: {pointer} is missing"))
}

fn str_at<'a>(v: &'a Value, pointer: &str, file: &str) -> &'a str {
    at(v, pointer, file).as_str().unwrap_or_else(|| {
        panic!(
            "{file}: {pointer} is not a string: {}",
            at(v, pointer, file)
        )
    })
}

fn arr_at<'a>(v: &'a Value, pointer: &str, file: &str) -> &'a Vec<Value> {
    at(v, pointer, file)
        .as_array()
        .unwrap_or_else(|| panic!("{file}: {pointer} is not a list"))
}

/// The one document of `file` with this kind and name.
fn object(file: &str, kind: &str, name: &str) -> Value {
    let found: Vec<Value> = yaml_docs(file)
        .into_iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{K8S}/{file}: expected exactly one {kind} named '{name}', found {}",
        found.len()
    );
    found.into_iter().next().unwrap()
}

fn deployment() -> Value {
    object("deployment.yaml", "Deployment", "slate")
}

/// The Deployment's only container.
fn container(d: &Value) -> &Value {
    container_of(d, "deployment.yaml")
}

/// The only container of the Deployment `d` of `file`.
fn container_of<'a>(d: &'a Value, file: &str) -> &'a Value {
    let cs = arr_at(d, "/spec/template/spec/containers", file);
    assert_eq!(
        cs.len(),
        1,
        "{file}: expected one container (slate), found {}",
        cs.len()
    );
    &cs[0]
}

/// A list of strings; `what` names it in a panic, file first.
fn strings(v: &Value, what: &str) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not a list"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("{what} holds a non-string: {s}"))
                .to_string()
        })
        .collect()
}

/// The container's command followed by its args: the full command line.
fn command_line(c: &Value) -> Vec<String> {
    command_line_of(c, "deployment.yaml")
}

fn command_line_of(c: &Value, file: &str) -> Vec<String> {
    let mut line = strings(&c["command"], &format!("{file}: the container's command"));
    if !c["args"].is_null() {
        line.extend(strings(
            &c["args"],
            &format!("{file}: the container's args"),
        ));
    }
    line
}

/// The `--config` path of a command line (`file` runs it), as slate's own CLI parses it.
fn config_arg(line: &[String], file: &str) -> PathBuf {
    let cli = Cli::try_parse_from(line)
        .unwrap_or_else(|e| panic!("{file}: slate rejects the command line {line:?}: {e}"));
    let Command::Sync(args) = cli.command else {
        panic!("{file}: {line:?} does not run `slate sync`");
    };
    assert!(
        !args.once,
        "{file}: {line:?} has --once: that reconciles once and exits, not the daemon"
    );
    assert!(
        args.src.is_none() && args.dst.is_none(),
        "{file}: {line:?} names SRC/DST: the pairs belong in the config"
    );
    args.tuning
        .config
        .unwrap_or_else(|| panic!("{file}: {line:?} has no --config"))
}

/// The mount path of the container's volumeMount of volume `volume`.
fn mount_of(c: &Value, volume: &str) -> Option<String> {
    c["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .map(str::to_string)
}

/// The name of the pod volume whose `kind` (configMap, persistentVolumeClaim, secret) has
/// `field` equal to `name`.
fn volume_with(d: &Value, kind: &str, field: &str, name: &str) -> Option<String> {
    d["spec"]["template"]["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v[kind][field] == name)
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
}

/// The container port named `http`.
fn http_port(c: &Value) -> u64 {
    http_port_of(c, "deployment.yaml")
}

fn http_port_of(c: &Value, file: &str) -> u64 {
    let ports = arr_at(c, "/ports", file);
    let p = ports
        .iter()
        .find(|p| p["name"] == "http")
        .unwrap_or_else(|| {
            panic!("{file}: no container port named 'http' (the probes and the Service use it)")
        });
    p["containerPort"]
        .as_u64()
        .unwrap_or_else(|| panic!("{file}: port 'http' has no numeric containerPort"))
}

/// Resolves a probe port or a Service targetPort (a name or a number) to a container port.
fn resolve_port(c: &Value, port: &Value, what: &str) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port
        .as_str()
        .unwrap_or_else(|| panic!("{what}: port is neither a name nor a number: {port}"));
    arr_at(c, "/ports", what)
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("{what}: port name '{name}' is not a port of the container"))
}

/// Kubernetes quantity of bytes: `512Mi`, `1Gi`, `500M`, `1048576`.
fn quantity(q: &str) -> u64 {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u64 = n
        .parse()
        .unwrap_or_else(|_| panic!("'{q}' is not a quantity"));
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => panic!("unknown unit '{other}' in quantity '{q}'"),
    };
    n * mult
}

/// The ConfigMap's config: the data key it is stored under, and slate's parse of it.
struct LoadedConfig {
    key: String,
    config: Config,
}

/// Loads the ConfigMap's config with slate's own loader (parse and validate), from a file named
/// as `--config` names it.
fn configmap_config() -> LoadedConfig {
    let cm = object("configmap.yaml", "ConfigMap", "slate-config");
    load_config(&cm, "configmap.yaml", &deployment(), "deployment.yaml")
}

/// The config of ConfigMap `cm` (of `cm_file`) that the Deployment `d` (of `d_file`) names
/// with `--config`, loaded with slate's own loader.
fn load_config(cm: &Value, cm_file: &str, d: &Value, d_file: &str) -> LoadedConfig {
    let line = command_line_of(container_of(d, d_file), d_file);
    let arg = config_arg(&line, d_file);
    let key = arg
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_else(|| panic!("{d_file}: --config {} has no file name", arg.display()))
        .to_string();
    let text = cm["data"][&key].as_str().unwrap_or_else(|| {
        panic!(
            "{cm_file}: no data key '{key}', the file name of --config {}",
            arg.display()
        )
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(&key);
    std::fs::write(&path, text).expect("write the config");
    let config = Config::load(Some(&path))
        .unwrap_or_else(|e| panic!("{cm_file}: slate rejects data.{key}: {e}"));
    LoadedConfig { key, config }
}

/// The variables of the environment that slate reads: every NAME in `slate sync --help`'s
/// environment section, the listener's token and the database (named in src/cli/), and
/// PostgreSQL's password variables (src/state/db.rs).
fn env_vars_slate_reads() -> BTreeSet<String> {
    let mut known: BTreeSet<String> = slate::stores::ENV_HELP
        .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|w| {
            w.len() > 3 && w.contains('_') && w.starts_with(|c: char| c.is_ascii_uppercase())
        })
        .map(str::to_string)
        .collect();
    let cli = [
        include_str!("../src/cli/mod.rs"),
        include_str!("../src/cli/sync.rs"),
        include_str!("../src/state/db.rs"),
    ]
    .concat();
    for name in ["SLATE_API_TOKEN", "SLATE_DB", "PGPASSWORD", "PGPASSFILE"] {
        if cli.contains(&format!("\"{name}\"")) {
            known.insert(name.to_string());
        }
    }
    assert!(
        known.contains("SLATE_API_TOKEN"),
        "src/cli/ no longer reads SLATE_API_TOKEN: update the manifests' token"
    );
    known
}

/// Keys whose values are secrets: a template must hold placeholders for them.
const SECRET_KEYS: &[&str] = &[
    "SLATE_API_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
];

const PLACEHOLDER: &str = "REPLACE-ME";

/// A systemd unit: (section, key) → every value, in order.
fn unit(rel: &str) -> BTreeMap<(String, String), Vec<String>> {
    let text = read(rel);
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    let mut pending = String::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        // a trailing backslash continues the line
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + line;
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{rel}:{}: not KEY=VALUE: {raw}", n + 1));
        assert!(
            !section.is_empty(),
            "{rel}:{}: {k}= before any [Section]",
            n + 1
        );
        out.entry((section.clone(), k.trim().to_string()))
            .or_default()
            .push(v.trim().to_string());
    }
    out
}

fn unit_value(u: &BTreeMap<(String, String), Vec<String>>, section: &str, key: &str) -> String {
    let vs = u
        .get(&(section.to_string(), key.to_string()))
        .unwrap_or_else(|| panic!("the unit has no [{section}] {key}="));
    vs.last().unwrap().clone()
}

/// `KEY=value` lines of an environment file (comments and blanks skipped).
fn env_file(rel: &str) -> BTreeMap<String, String> {
    read(rel)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("{rel}: not NAME=value: {l}"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

#[test]
fn every_manifest_parses_and_the_kustomization_lists_all_but_the_secret_template() {
    check_kustomization("", &["configmap.yaml", "pvc.yaml", "deployment.yaml"], &[]);
}

/// Every YAML file of `manifests/kubernetes/SUB` parses into objects (but the files of
/// `not_objects`: Helm values and the like), and its kustomization.yaml lists each of them but
/// the Secret templates, and `needed`.
fn check_kustomization(sub: &str, needed: &[&str], not_objects: &[&str]) {
    let at_sub = |f: &str| {
        if sub.is_empty() {
            f.to_string()
        } else {
            format!("{sub}/{f}")
        }
    };
    let dir = repo(K8S).join(sub);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    for f in &files {
        if not_objects.contains(&f.as_str()) {
            yaml_docs(&at_sub(f));
            continue;
        }
        for (i, d) in yaml_docs(&at_sub(f)).iter().enumerate() {
            for field in ["apiVersion", "kind"] {
                assert!(
                    d[field].is_string(),
                    "{K8S}/{f}: document {i} has no {field}"
                );
            }
            if d["kind"] != "Kustomization" {
                assert!(
                    d["metadata"]["name"].is_string(),
                    "{K8S}/{f}: document {i} has no metadata.name"
                );
            }
        }
    }
    let kfile = at_sub("kustomization.yaml");
    let k = &yaml_docs(&kfile)[0];
    assert_eq!(k["kind"], "Kustomization", "{kfile}: kind");
    let listed: BTreeSet<String> = arr_at(k, "/resources", &kfile)
        .iter()
        .map(|r| r.as_str().expect("resource is a string").to_string())
        .collect();
    for r in &listed {
        assert!(
            dir.join(r).is_file(),
            "{kfile} lists '{r}', which is not a file in {}",
            dir.display()
        );
    }
    for f in &files {
        let template = f.contains(".example.") || f.contains("secret");
        if f == "kustomization.yaml" || template || not_objects.contains(&f.as_str()) {
            assert!(
                !listed.contains(f),
                "{kfile} lists '{f}': a template of placeholders must not be applied over the \
                 real Secret, nor a file that holds no Kubernetes object"
            );
        } else {
            assert!(
                listed.contains(f),
                "{kfile} does not list '{f}': `kubectl apply -k` would skip it"
            );
        }
    }
    for needed in needed {
        assert!(listed.contains(*needed), "{kfile} does not list {needed}");
    }
}

#[test]
fn the_deployment_runs_exactly_one_pod_and_lets_it_drain() {
    let d = deployment();
    assert_eq!(
        d["spec"]["replicas"], 1,
        "deployment.yaml: spec.replicas must be 1 (one process owns the SQLite database), got {}",
        d["spec"]["replicas"]
    );
    assert_eq!(
        d["spec"]["strategy"]["type"], "Recreate",
        "deployment.yaml: spec.strategy.type must be Recreate (a rolling update runs two pods \
         on one database), got {}",
        d["spec"]["strategy"]["type"]
    );
    let grace = at(
        &d,
        "/spec/template/spec/terminationGracePeriodSeconds",
        "deployment.yaml",
    )
    .as_u64()
    .expect("terminationGracePeriodSeconds is a number");
    assert!(
        grace >= 40,
        "deployment.yaml: terminationGracePeriodSeconds is {grace}; slate drains in-flight \
         copies for up to 30 s after SIGTERM: give it at least 40"
    );
    let selector = at(&d, "/spec/selector/matchLabels", "deployment.yaml")
        .as_object()
        .expect("matchLabels is a map");
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector {
        assert_eq!(
            &labels[k], v,
            "deployment.yaml: selector label {k}={v} is not on the pod template (labels: {labels})"
        );
    }
    let c = container(&d);
    let sc = &c["securityContext"];
    assert_eq!(
        sc["readOnlyRootFilesystem"], true,
        "deployment.yaml: readOnlyRootFilesystem must be true"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "deployment.yaml: allowPrivilegeEscalation must be false"
    );
    assert!(
        sc["capabilities"]["drop"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "ALL")),
        "deployment.yaml: the container must drop ALL capabilities"
    );
    let pod_sc = &d["spec"]["template"]["spec"]["securityContext"];
    assert!(
        sc["runAsNonRoot"] == true || pod_sc["runAsNonRoot"] == true,
        "deployment.yaml: runAsNonRoot must be true"
    );
    assert!(
        c["volumeMounts"]
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| m["mountPath"] == "/tmp")),
        "deployment.yaml: the root file system is read-only, so /tmp (SQLite's temporary files, \
         temp_store = FILE) needs a writable volume"
    );
    let limit = str_at(c, "/resources/limits/memory", "deployment.yaml container");
    assert!(
        quantity(limit) >= 256 << 20,
        "deployment.yaml: memory limit {limit} is too small for slate"
    );
}

#[test]
fn one_port_everywhere_config_container_probes_service() {
    let d = deployment();
    let c = container(&d);
    let port = http_port(c);
    let cfg = configmap_config().config;
    let listen = cfg
        .daemon
        .listen
        .as_deref()
        .expect("configmap.yaml: [daemon] listen must be set (probes need the listener)");
    let addr: SocketAddr = listen
        .parse()
        .unwrap_or_else(|_| panic!("configmap.yaml: listen '{listen}' is not an address"));
    assert_eq!(
        u64::from(addr.port()),
        port,
        "configmap.yaml listens on port {} but the container port 'http' is {port}",
        addr.port()
    );
    assert!(
        !addr.ip().is_loopback(),
        "configmap.yaml: listen '{listen}' is loopback: the kubelet's probes and the Service \
         cannot reach it (use 0.0.0.0:{port})"
    );
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        let p = &c[probe];
        if p.is_null() && probe == "startupProbe" {
            continue;
        }
        let what = format!("deployment.yaml {probe}");
        assert_eq!(
            str_at(p, "/httpGet/path", &what),
            path,
            "{what}: path must be {path}"
        );
        let pp = resolve_port(c, at(p, "/httpGet/port", &what), &what);
        assert_eq!(
            pp, port,
            "{what}: port {pp} is not the listener's port {port}"
        );
    }
    let svc = object("service.yaml", "Service", "slate");
    let ports = arr_at(&svc, "/spec/ports", "service.yaml");
    assert_eq!(ports.len(), 1, "service.yaml: expected one port");
    let target = resolve_port(c, &ports[0]["targetPort"], "service.yaml targetPort");
    assert_eq!(
        target, port,
        "service.yaml: targetPort resolves to {target}, not the listener's port {port}"
    );
    assert_eq!(
        ports[0]["port"].as_u64(),
        Some(port),
        "service.yaml: port should be {port} like the listener's"
    );
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    for (k, v) in at(&svc, "/spec/selector", "service.yaml")
        .as_object()
        .expect("selector is a map")
    {
        assert_eq!(
            &pod_labels[k], v,
            "service.yaml: selector {k}={v} matches no label of the Deployment's pods"
        );
    }
    assert_eq!(
        svc["spec"]["publishNotReadyAddresses"], true,
        "service.yaml: webhook deliveries are accepted during the backfill, while /readyz is \
         503: publishNotReadyAddresses must be true"
    );
}

#[test]
fn the_config_loads_with_slate_and_agrees_with_the_volumes() {
    let d = deployment();
    let c = container(&d);
    let LoadedConfig { key, config: cfg } = configmap_config();
    assert!(
        !cfg.pairs.is_empty(),
        "configmap.yaml: data.{key} has no [[pairs]]"
    );

    // the config is mounted where --config points
    let arg = config_arg(&command_line(c), "deployment.yaml");
    let config_volume = volume_with(&d, "configMap", "name", "slate-config")
        .expect("deployment.yaml: no volume of the ConfigMap slate-config");
    let mount = mount_of(c, &config_volume).unwrap_or_else(|| {
        panic!("deployment.yaml: volume '{config_volume}' (slate-config) is not mounted")
    });
    assert_eq!(
        Path::new(&mount),
        arg.parent().expect("--config has a directory"),
        "deployment.yaml: slate-config is mounted at {mount} but --config is {}",
        arg.display()
    );
    let volumes = arr_at(&d, "/spec/template/spec/volumes", "deployment.yaml");
    let cm_volume = volumes.iter().find(|v| v["name"] == config_volume).unwrap();
    assert!(
        cm_volume["configMap"]["items"].is_null(),
        "deployment.yaml: the slate-config volume remaps keys (items): --config {} would miss",
        arg.display()
    );

    // the database lies on the PVC
    let pvc = object("pvc.yaml", "PersistentVolumeClaim", "slate-data");
    let modes = strings(&pvc["spec"]["accessModes"], "pvc.yaml: accessModes");
    assert!(
        modes.iter().all(|m| m.starts_with("ReadWriteOnce")),
        "pvc.yaml: accessModes {modes:?}: the SQLite database needs ReadWriteOnce(Pod)"
    );
    let data_volume = volume_with(&d, "persistentVolumeClaim", "claimName", "slate-data")
        .expect("deployment.yaml: no volume of the PVC slate-data");
    let data_mount = mount_of(c, &data_volume).unwrap_or_else(|| {
        panic!("deployment.yaml: volume '{data_volume}' (slate-data) is not mounted")
    });
    let db = cfg
        .daemon
        .db
        .as_deref()
        .expect("configmap.yaml: [daemon] db must be set (the default is under $HOME)");
    assert!(
        Path::new(db).starts_with(&data_mount) && Path::new(db) != Path::new(&data_mount),
        "configmap.yaml: daemon.db = {db} is not under the PVC's mountPath {data_mount}: the \
         database would be lost at every restart"
    );

    // every pair can start as a daemon: its event source fits its scheme, local folders are on
    // a volume
    let mounts: Vec<String> = c["volumeMounts"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut webhook = false;
    for (i, p) in cfg.pairs.iter().enumerate() {
        let name = p.name.clone().unwrap_or_else(|| format!("pairs[{i}]"));
        let src = Location::parse(&p.src).expect("validated by Config::load");
        EventSource::choose(&src, p.events.as_deref()).unwrap_or_else(|e| {
            panic!("configmap.yaml: pair {name}: the daemon would refuse its events: {e}")
        });
        webhook |= p.events.as_deref() == Some("webhook");
        for url in [&p.src, &p.dst] {
            let loc = Location::parse(url).expect("validated by Config::load");
            if loc.scheme == Scheme::Local {
                assert!(
                    mounts
                        .iter()
                        .any(|m| m != &mount && loc.local_path().starts_with(m)),
                    "configmap.yaml: pair {name}: local folder {url} is on no volume of the pod"
                );
            }
        }
    }
    if webhook {
        object("service.yaml", "Service", "slate");
    }

    buffers_fit(c, &cfg, "configmap.yaml", "deployment.yaml");
}

/// The chunk buffers of the config `cfg` (of `cm_file`), bounded per pair, fit in the memory
/// limit of the container `c` (of `d_file`), run with its command line.
fn buffers_fit(c: &Value, cfg: &Config, cm_file: &str, d_file: &str) {
    let parsed = Cli::try_parse_from(command_line_of(c, d_file)).expect("parsed above");
    let Command::Sync(args) = parsed.command else {
        unreachable!()
    };
    let opts = slate::cli::copy::options(&args.tuning, cfg);
    opts.validate()
        .unwrap_or_else(|e| panic!("{cm_file}: [copy] is refused: {e}"));
    let limit = quantity(str_at(c, "/resources/limits/memory", d_file));
    let buffers = opts.buffer_bound() * cfg.pairs.len() as u64;
    assert!(
        buffers <= limit / 2,
        "{cm_file}: {} pairs x {} MiB of chunk buffers ([copy] memory_limit, transfers x \
         streams x chunk_size) = {} MiB, more than half the container's memory limit ({} MiB)",
        cfg.pairs.len(),
        opts.buffer_bound() >> 20,
        buffers >> 20,
        limit >> 20
    );
}

#[test]
fn the_image_tag_is_the_crate_version() {
    let d = deployment();
    let image = str_at(container(&d), "/image", "deployment.yaml container");
    let (repo_part, tag) = image
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .unwrap_or_else(|| panic!("deployment.yaml: image {image} has no tag"));
    assert_eq!(
        tag,
        env!("CARGO_PKG_VERSION"),
        "deployment.yaml: image tag {tag} is not the crate version {} (Cargo.toml)",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        repo_part, "ghcr.io/slate-sync/slate",
        "deployment.yaml: image"
    );
}

/// What every slate unit sets: how it runs and its sandbox.
const UNIT_SETTINGS: &[(&str, &str)] = &[
    ("Type", "simple"),
    ("Restart", "on-failure"),
    ("KillSignal", "SIGTERM"),
    ("NoNewPrivileges", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectControlGroups", "yes"),
    ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("MemoryDenyWriteExecute", "yes"),
    ("SystemCallFilter", "@system-service"),
    ("CapabilityBoundingSet", ""),
    ("LimitNOFILE", "65536"),
];

#[test]
fn the_systemd_unit_runs_what_the_deployment_runs() {
    let rel = format!("{SYSTEMD}/slate.service");
    let u = unit(&rel);
    let exec = unit_value(&u, "Service", "ExecStart");
    let exec: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
    let line = command_line(container(&deployment()));
    assert_eq!(
        exec, line,
        "{rel}: ExecStart {exec:?} differs from the Deployment's command + args {line:?}"
    );
    assert_eq!(exec[0], "/usr/local/bin/slate", "{rel}: ExecStart binary");
    assert_eq!(
        config_arg(&exec, &rel),
        Path::new("/etc/slate/slate.toml"),
        "{rel}: --config path"
    );

    let state = unit_value(&u, "Service", "StateDirectory");
    let state_dir = Path::new("/var/lib").join(&state);
    let cfg = configmap_config().config;
    let db = cfg.daemon.db.expect("configmap.yaml: [daemon] db");
    assert_eq!(
        Path::new(&db).parent(),
        Some(state_dir.as_path()),
        "{rel}: StateDirectory={state} is {} but the database is {db}",
        state_dir.display()
    );

    let stop: u64 = unit_value(&u, "Service", "TimeoutStopSec")
        .trim_end_matches('s')
        .parse()
        .expect("TimeoutStopSec in seconds");
    assert!(
        stop >= 40,
        "{rel}: TimeoutStopSec={stop}: slate drains copies for up to 30 s; give it at least 40"
    );
    let env_file_value = unit_value(&u, "Service", "EnvironmentFile");
    assert_eq!(
        env_file_value, "-/etc/slate/credentials.env",
        "{rel}: EnvironmentFile"
    );
    for &(key, want) in UNIT_SETTINGS {
        assert_eq!(
            unit_value(&u, "Service", key),
            want,
            "{rel}: [Service] {key}= should be '{want}'"
        );
    }
    assert!(
        u.contains_key(&("Service".into(), "DynamicUser".into()))
            || u.contains_key(&("Service".into(), "User".into())),
        "{rel}: run as DynamicUser=yes or a dedicated User=, never root"
    );
    assert_ne!(
        u.get(&("Service".into(), "User".into()))
            .and_then(|v| v.last())
            .map(String::as_str),
        Some("root"),
        "{rel}: User=root"
    );
    assert_eq!(
        unit_value(&u, "Install", "WantedBy"),
        "multi-user.target",
        "{rel}: WantedBy"
    );
}

#[test]
fn the_credential_templates_name_only_variables_slate_reads() {
    let known = env_vars_slate_reads();
    let cfg = configmap_config().config;
    let db = cfg.daemon.db.clone().unwrap_or_default();
    let listen_is_loopback = cfg
        .daemon
        .listen
        .as_deref()
        .and_then(|l| l.parse::<SocketAddr>().ok())
        .is_none_or(|a| a.ip().is_loopback());

    // Kubernetes: the Secret the Deployment loads
    let d = deployment();
    let c = container(&d);
    let refs: Vec<&str> = arr_at(c, "/envFrom", "deployment.yaml container")
        .iter()
        .filter_map(|e| e["secretRef"]["name"].as_str())
        .collect();
    assert_eq!(
        refs,
        ["slate-credentials"],
        "deployment.yaml: envFrom should load the Secret slate-credentials"
    );
    let secret = object("secret.example.yaml", "Secret", "slate-credentials");
    let data = at(&secret, "/stringData", "secret.example.yaml")
        .as_object()
        .expect("stringData is a map");
    assert!(
        secret["data"].is_null(),
        "secret.example.yaml: use stringData (readable placeholders), not data"
    );
    let mut k8s_env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in data {
        let v = v
            .as_str()
            .unwrap_or_else(|| panic!("secret.example.yaml: {k} is not a string"));
        k8s_env.insert(k.clone(), v.to_string());
    }
    let token_file = command_line(c)
        .iter()
        .any(|a| a.starts_with("--token-file"));
    check_env("secret.example.yaml", &k8s_env, &known, &db);
    assert!(
        listen_is_loopback || token_file || k8s_env.contains_key("SLATE_API_TOKEN"),
        "secret.example.yaml: no SLATE_API_TOKEN, but configmap.yaml listens on {:?}: slate \
         refuses a non-loopback listener without a token",
        cfg.daemon.listen
    );
    // GOOGLE_APPLICATION_CREDENTIALS points at a file of a mounted Secret
    if let Some(gac) = k8s_env.get("GOOGLE_APPLICATION_CREDENTIALS") {
        let gac = Path::new(gac);
        let volumes = arr_at(&d, "/spec/template/spec/volumes", "deployment.yaml");
        let hit = volumes.iter().find_map(|v| {
            let secret_name = v["secret"]["secretName"].as_str()?;
            let mount = mount_of(c, v["name"].as_str()?)?;
            let file = gac.strip_prefix(&mount).ok()?;
            Some((secret_name.to_string(), file.to_string_lossy().into_owned()))
        });
        let (secret_name, file) = hit.unwrap_or_else(|| {
            panic!(
                "secret.example.yaml: GOOGLE_APPLICATION_CREDENTIALS={} is under no mounted \
                 Secret volume of the Deployment",
                gac.display()
            )
        });
        let key_secret = object("secret.example.yaml", "Secret", &secret_name);
        assert!(
            key_secret["stringData"][&file].is_string() || key_secret["data"][&file].is_string(),
            "secret.example.yaml: Secret {secret_name} has no key '{file}', the file \
             GOOGLE_APPLICATION_CREDENTIALS names"
        );
    }

    // systemd: the environment file of the unit
    let rel = format!("{SYSTEMD}/credentials.env.example");
    let env = env_file(&rel);
    check_env(&rel, &env, &known, &db);
    assert!(
        env.contains_key("SLATE_API_TOKEN"),
        "{rel}: SLATE_API_TOKEN missing (needed as soon as listen is not loopback)"
    );
}

/// Every key is a variable slate reads, secrets are placeholders, SLATE_DB does not move the
/// database away from the config's.
fn check_env(file: &str, env: &BTreeMap<String, String>, known: &BTreeSet<String>, db: &str) {
    assert!(!env.is_empty(), "{file}: names no variable");
    for (k, v) in env {
        assert!(
            known.contains(k),
            "{file}: {k} is not a variable slate reads (`slate sync --help` lists them)"
        );
        if SECRET_KEYS.contains(&k.as_str()) {
            assert!(
                v.contains(PLACEHOLDER),
                "{file}: {k} holds a value that is not a {PLACEHOLDER} placeholder: a template \
                 must never carry a real secret"
            );
        }
    }
    if let Some(v) = env.get("SLATE_DB") {
        assert_eq!(
            v, db,
            "{file}: SLATE_DB={v} wins over the config's daemon.db = {db}"
        );
    }
}

// ---- N workers on one PostgreSQL database: manifests/kubernetes/workers, slate@.service ----

const WORKERS: &str = "workers";
const AUTOSCALING: &str = "workers/autoscaling";
const WORKERS_DEPLOYMENT: &str = "workers/deployment.yaml";

fn workers() -> Value {
    object(WORKERS_DEPLOYMENT, "Deployment", "slate-workers")
}

/// The seconds slate drains in-flight copies after SIGTERM, as src/cli/sync.rs sets them.
fn shutdown_grace_secs() -> u64 {
    let src = include_str!("../src/cli/sync.rs");
    let (_, tail) = src
        .split_once("shutdown_grace: std::time::Duration::from_secs(")
        .expect("src/cli/sync.rs no longer sets shutdown_grace with from_secs: update this test");
    tail.split(')')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("shutdown_grace is a number of seconds")
}

/// Whether slate serves `path` without a token (the probes' routes of src/server/metrics.rs).
fn is_probe_route(path: &str) -> bool {
    let src = include_str!("../src/server/metrics.rs");
    let start = src
        .find("fn probe_routes(")
        .expect("src/server/metrics.rs has no probe_routes");
    let body = &src[start..start + src[start..].find("\n}\n").expect("end of probe_routes")];
    body.contains(&format!(".route(\"{path}\""))
}

/// Whether slate serves `path` behind the token (the metrics route).
fn is_metrics_route(path: &str) -> bool {
    include_str!("../src/server/metrics.rs").contains(&format!(".route(\"{path}\", get(metrics))"))
}

/// Whether slate exports the gauge family `name` on GET /metrics.
fn is_gauge(name: &str) -> bool {
    include_str!("../src/server/metrics.rs").contains(&format!("(\"{name}\", MetricType::Gauge)"))
}

/// Every `matchLabels` pair of `selector` is a label of `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v))
}

/// A database URL of a template: PostgreSQL as slate parses `--db`, a placeholder password,
/// no TLS demanded (slate connects without TLS).
fn check_db_url(url: &str, file: &str) {
    match slate::state::db::Location::parse(url) {
        Ok(slate::state::db::Location::Postgres(_)) => {}
        other => panic!("{file}: SLATE_DB {url} is not a PostgreSQL URL for slate: {other:?}"),
    }
    assert!(
        url.contains(PLACEHOLDER),
        "{file}: the database URL must carry a {PLACEHOLDER} password, never a real one"
    );
    for tls in ["sslmode=require", "sslmode=verify"] {
        assert!(
            !url.contains(tls),
            "{file}: {tls}: slate connects to PostgreSQL without TLS, the connection would fail"
        );
    }
}

#[test]
fn the_workers_kustomizations_list_every_manifest_but_the_templates() {
    check_kustomization(
        WORKERS,
        &[
            "configmap.yaml",
            "deployment.yaml",
            "service.yaml",
            "pdb.yaml",
        ],
        &[],
    );
    check_kustomization(
        AUTOSCALING,
        &["hpa.yaml", "servicemonitor.yaml"],
        &["prometheus-adapter-values.yaml"],
    );
}

#[test]
fn the_workers_deployment_runs_several_pods_on_postgresql_without_a_volume() {
    let f = WORKERS_DEPLOYMENT;
    let d = workers();
    let replicas = d["spec"]["replicas"].as_u64().unwrap_or(1);
    assert!(
        replicas >= 2,
        "{f}: spec.replicas is {replicas}: workers are several pods (the single replica is \
         ../deployment.yaml)"
    );
    let strategy = &d["spec"]["strategy"];
    assert_ne!(
        strategy["type"], "Recreate",
        "{f}: Recreate stops every worker at once; workers roll (RollingUpdate)"
    );
    if let Some(n) = strategy["rollingUpdate"]["maxUnavailable"].as_u64() {
        assert!(
            n < replicas,
            "{f}: maxUnavailable {n} stops every worker during a rollout"
        );
    }
    let selector = at(&d, "/spec/selector/matchLabels", f);
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    assert!(
        selects(selector, pod_labels),
        "{f}: the selector {selector} does not match the pod template's labels {pod_labels}"
    );
    // no overlap with the single-replica Deployment: its selector must not take these pods
    let single = deployment();
    assert!(
        !selects(&single["spec"]["selector"]["matchLabels"], pod_labels),
        "{f}: the pods carry the labels the single-replica Deployment `slate` selects: one \
         Deployment would count the other's pods"
    );

    let spec = &d["spec"]["template"]["spec"];
    // no state of its own: no PVC, no ephemeral volume claim, no host path
    for v in spec["volumes"].as_array().into_iter().flatten() {
        for kind in ["persistentVolumeClaim", "ephemeral", "hostPath"] {
            assert!(
                v[kind].is_null(),
                "{f}: volume {} is a {kind}: the workers keep their state in PostgreSQL",
                v["name"]
            );
        }
    }
    assert!(
        d["spec"]["volumeClaimTemplates"].is_null(),
        "{f}: volumeClaimTemplates"
    );
    // a worker frees the claims of dead workers of its own host name: the pods need their own
    assert_ne!(
        spec["hostNetwork"], true,
        "{f}: hostNetwork: the workers need no node network (they only call out), and its \
         ports would clash between two workers of a node"
    );
    assert!(
        spec["hostname"].is_null(),
        "{f}: spec.hostname gives every pod the same name: logs and lease holders would not \
         tell the workers apart"
    );
    let grace = at(&d, "/spec/template/spec/terminationGracePeriodSeconds", f)
        .as_u64()
        .expect("terminationGracePeriodSeconds is a number");
    let drain = shutdown_grace_secs();
    assert!(
        grace >= drain + 10,
        "{f}: terminationGracePeriodSeconds is {grace}; slate drains in-flight copies for up \
         to {drain} s after SIGTERM: give it at least {}",
        drain + 10
    );
    // spread over nodes
    let terms = arr_at(
        &d,
        "/spec/template/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution",
        f,
    );
    assert!(
        terms.iter().any(|t| {
            t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
                && selects(
                    &t["podAffinityTerm"]["labelSelector"]["matchLabels"],
                    pod_labels,
                )
        }),
        "{f}: no preferred pod anti-affinity on kubernetes.io/hostname selecting the workers"
    );

    let c = container_of(&d, f);
    let line = command_line_of(c, f);
    let cli = Cli::try_parse_from(&line)
        .unwrap_or_else(|e| panic!("{f}: slate rejects the command line {line:?}: {e}"));
    config_arg(&line, f);
    let Command::Sync(args) = cli.command else {
        unreachable!()
    };
    assert!(
        args.db.is_none(),
        "{f}: --db on the command line shows the database password in the pod spec: SLATE_DB \
         from the Secret"
    );
    for (what, v) in [
        ("requests.cpu", &c["resources"]["requests"]["cpu"]),
        ("requests.memory", &c["resources"]["requests"]["memory"]),
        ("limits.memory", &c["resources"]["limits"]["memory"]),
    ] {
        assert!(v.is_string(), "{f}: the container has no resources.{what}");
    }
    let sc = &c["securityContext"];
    assert_eq!(
        sc["readOnlyRootFilesystem"], true,
        "{f}: readOnlyRootFilesystem"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "{f}: allowPrivilegeEscalation"
    );
    assert_eq!(
        c["image"],
        container(&single)["image"],
        "{f}: the image differs from ../deployment.yaml's"
    );

    // SLATE_DB from a Secret key, which the template holds, with a PostgreSQL URL
    let known = env_vars_slate_reads();
    let env = arr_at(c, "/env", f);
    for e in env {
        let name = e["name"].as_str().expect("env name");
        assert!(
            known.contains(name),
            "{f}: env {name} is not a variable slate reads"
        );
    }
    let db = env
        .iter()
        .find(|e| e["name"] == "SLATE_DB")
        .unwrap_or_else(|| panic!("{f}: no env SLATE_DB: the workers need the PostgreSQL URL"));
    assert!(
        db["value"].is_null(),
        "{f}: SLATE_DB has a literal value: the URL holds the password, take it from a Secret"
    );
    let secret_name = str_at(db, "/valueFrom/secretKeyRef/name", f);
    let secret_key = str_at(db, "/valueFrom/secretKeyRef/key", f);
    assert_ne!(
        db["valueFrom"]["secretKeyRef"]["optional"], true,
        "{f}: an optional SLATE_DB would start a worker without its database"
    );
    let template = format!("{WORKERS}/secret.example.yaml");
    let secret = object(&template, "Secret", secret_name);
    let url = secret["stringData"][secret_key]
        .as_str()
        .unwrap_or_else(|| {
            panic!("{template}: Secret {secret_name} has no stringData key '{secret_key}'")
        });
    check_db_url(url, &template);
    // the other Secrets it loads or mounts are templated (the single install's)
    for r in arr_at(c, "/envFrom", f) {
        let name = str_at(r, "/secretRef/name", f);
        object("secret.example.yaml", "Secret", name);
        assert_ne!(r["secretRef"]["optional"], true, "{f}: {name} optional");
    }
}

#[test]
fn the_workers_config_loads_with_slate_and_names_no_database_file() {
    let f = WORKERS_DEPLOYMENT;
    let cm_file = format!("{WORKERS}/configmap.yaml");
    let d = workers();
    let c = container_of(&d, f);
    let volume = d["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["configMap"]["name"].is_string()))
        .unwrap_or_else(|| panic!("{f}: no ConfigMap volume"));
    let cm_name = volume["configMap"]["name"].as_str().unwrap();
    let cm = object(&cm_file, "ConfigMap", cm_name);
    let LoadedConfig { key, config: cfg } = load_config(&cm, &cm_file, &d, f);
    assert!(
        !cfg.pairs.is_empty(),
        "{cm_file}: data.{key} has no [[pairs]]"
    );
    let arg = config_arg(&command_line_of(c, f), f);
    let mount = mount_of(c, volume["name"].as_str().unwrap())
        .unwrap_or_else(|| panic!("{f}: the ConfigMap volume is not mounted"));
    assert_eq!(
        Path::new(&mount),
        arg.parent().unwrap(),
        "{f}: {cm_name} is mounted at {mount} but --config is {}",
        arg.display()
    );
    assert!(
        volume["configMap"]["items"].is_null(),
        "{f}: items remap the keys"
    );
    if let Some(db) = &cfg.daemon.db {
        panic!(
            "{cm_file}: daemon.db = {db}: the workers' database is SLATE_DB (PostgreSQL); \
             a file here is what a worker would open without it"
        );
    }
    for (i, p) in cfg.pairs.iter().enumerate() {
        let name = p.name.clone().unwrap_or_else(|| format!("pairs[{i}]"));
        let src = Location::parse(&p.src).expect("validated by Config::load");
        EventSource::choose(&src, p.events.as_deref()).unwrap_or_else(|e| {
            panic!("{cm_file}: pair {name}: the daemon would refuse its events: {e}")
        });
        for url in [&p.src, &p.dst] {
            assert_ne!(
                Location::parse(url).unwrap().scheme,
                Scheme::Local,
                "{cm_file}: pair {name}: {url} is a local folder: each pod would have its own"
            );
        }
    }
    buffers_fit(c, &cfg, &cm_file, f);
}

#[test]
fn the_workers_probes_and_service_point_at_the_listener() {
    let f = WORKERS_DEPLOYMENT;
    let d = workers();
    let c = container_of(&d, f);
    let port = http_port_of(c, f);
    let cm_file = format!("{WORKERS}/configmap.yaml");
    let cm = object(&cm_file, "ConfigMap", "slate-workers-config");
    let cfg = load_config(&cm, &cm_file, &d, f).config;
    let listen = cfg
        .daemon
        .listen
        .as_deref()
        .unwrap_or_else(|| panic!("{cm_file}: [daemon] listen must be set (the probes)"));
    let addr: SocketAddr = listen
        .parse()
        .unwrap_or_else(|_| panic!("{cm_file}: listen '{listen}' is not an address"));
    assert_eq!(
        u64::from(addr.port()),
        port,
        "{cm_file}: listen port vs containerPort http"
    );
    assert!(
        !addr.ip().is_loopback(),
        "{cm_file}: listen '{listen}' is loopback"
    );
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        let what = format!("{f} {probe}");
        let p = at(c, &format!("/{probe}"), &what);
        let got = str_at(p, "/httpGet/path", &what);
        assert_eq!(got, path, "{what}: path");
        assert!(
            is_probe_route(got),
            "{what}: {got} is not a probe route of slate (src/server/metrics.rs): it would \
             answer 404 or 401"
        );
        let pp = resolve_port(c, at(p, "/httpGet/port", &what), &what);
        assert_eq!(pp, port, "{what}: port {pp} is not the listener's {port}");
    }
    let sfile = format!("{WORKERS}/service.yaml");
    let svc = object(&sfile, "Service", "slate-workers");
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    assert!(
        selects(at(&svc, "/spec/selector", &sfile), pod_labels),
        "{sfile}: the selector does not match the workers' pods"
    );
    for p in arr_at(&svc, "/spec/ports", &sfile) {
        let target = resolve_port(c, &p["targetPort"], &sfile);
        assert_eq!(
            target, port,
            "{sfile}: targetPort is not the listener's port"
        );
    }
    assert_eq!(
        svc["spec"]["publishNotReadyAddresses"], true,
        "{sfile}: deliveries are accepted during a backfill: publishNotReadyAddresses"
    );
    // the listener binds 0.0.0.0: the token must come with the credentials
    let creds = object("secret.example.yaml", "Secret", "slate-credentials");
    assert!(
        creds["stringData"]["SLATE_API_TOKEN"].is_string(),
        "secret.example.yaml: no SLATE_API_TOKEN for the workers' listener"
    );
}

#[test]
fn the_pdb_covers_the_workers_and_never_blocks_every_drain() {
    let f = format!("{WORKERS}/pdb.yaml");
    let pdb = object(&f, "PodDisruptionBudget", "slate-workers");
    let d = workers();
    let replicas = d["spec"]["replicas"].as_u64().unwrap();
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    let selector = at(&pdb, "/spec/selector/matchLabels", &f);
    assert!(
        selects(selector, pod_labels),
        "{f}: the selector {selector} does not match the workers' pods {pod_labels}"
    );
    let spec = &pdb["spec"];
    match (
        spec["maxUnavailable"].as_u64(),
        spec["minAvailable"].as_u64(),
    ) {
        (Some(n), None) => assert!(n >= 1 && n < replicas, "{f}: maxUnavailable {n}"),
        (None, Some(n)) => assert!(
            n >= 1 && n < replicas,
            "{f}: minAvailable {n} with {replicas} replicas: no drain could ever evict one"
        ),
        _ => panic!("{f}: set a numeric maxUnavailable or minAvailable (one)"),
    }
    assert_eq!(
        spec["unhealthyPodEvictionPolicy"], "AlwaysAllow",
        "{f}: workers are not ready for the hours of a first backfill: without AlwaysAllow \
         they block every drain"
    );
}

#[test]
fn the_autoscaler_scales_the_workers_on_slates_backlog() {
    let dir = AUTOSCALING;
    let f = format!("{dir}/hpa.yaml");
    let hpa = object(&f, "HorizontalPodAutoscaler", "slate-workers");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2", "{f}: apiVersion");
    let d = workers();
    let target = at(&hpa, "/spec/scaleTargetRef", &f);
    for (k, want) in [
        ("apiVersion", &d["apiVersion"]),
        ("kind", &d["kind"]),
        ("name", &d["metadata"]["name"]),
    ] {
        assert_eq!(
            &target[k], want,
            "{f}: scaleTargetRef.{k} is not the workers'"
        );
    }
    let min = hpa["spec"]["minReplicas"].as_u64().unwrap_or(1);
    let max = at(&hpa, "/spec/maxReplicas", &f)
        .as_u64()
        .expect("maxReplicas");
    assert!(
        min >= 2 && min <= max,
        "{f}: minReplicas {min}, maxReplicas {max}"
    );

    // the metric: External (every worker reports the whole backlog; a Pods metric would
    // multiply it by the replica count), served by the adapter rule over a gauge slate exports
    let values_file = format!("{dir}/prometheus-adapter-values.yaml");
    let values = &yaml_docs(&values_file)[0];
    let rules = arr_at(values, "/rules/external", &values_file);
    let svc = object(
        &format!("{WORKERS}/service.yaml"),
        "Service",
        "slate-workers",
    );
    let metrics = arr_at(&hpa, "/spec/metrics", &f);
    assert!(!metrics.is_empty(), "{f}: no metric");
    for m in metrics {
        assert_eq!(
            m["type"], "External",
            "{f}: a {} metric: each worker reports the whole shared backlog, so only an \
             External metric (one number) scales right",
            m["type"]
        );
        assert_eq!(
            m["external"]["target"]["type"], "AverageValue",
            "{f}: target type"
        );
        let name = str_at(m, "/external/metric/name", &f);
        let rule = rules
            .iter()
            .find(|r| r["name"]["as"] == name)
            .unwrap_or_else(|| panic!("{values_file}: no external rule serves {name}"));
        let series = str_at(rule, "/seriesQuery", &values_file);
        let family = series.split(['{', ' ']).next().unwrap();
        assert!(
            is_gauge(family),
            "{values_file}: {family} is not a gauge slate exports (src/server/metrics.rs)"
        );
        let query = str_at(rule, "/metricsQuery", &values_file);
        assert!(
            query.contains("max by") && query.contains("pair"),
            "{values_file}: every worker reports every pair's backlog: take the max by pair \
             before summing, or it counts N times"
        );
        // the series carry the Service's name (the ServiceMonitor scrapes through it)
        if let Some(sel) = m["external"]["metric"]["selector"]["matchLabels"].as_object() {
            if let Some(s) = sel.get("service") {
                assert_eq!(s, &svc["metadata"]["name"], "{f}: selector service");
            }
        }
    }

    // Prometheus scrapes the workers' /metrics through their Service, with the token
    let sm_file = format!("{dir}/servicemonitor.yaml");
    let sm = object(&sm_file, "ServiceMonitor", "slate-workers");
    assert!(
        selects(
            at(&sm, "/spec/selector/matchLabels", &sm_file),
            &svc["metadata"]["labels"]
        ),
        "{sm_file}: the selector does not match the Service slate-workers"
    );
    let ports: Vec<&Value> = arr_at(&svc, "/spec/ports", "service.yaml")
        .iter()
        .map(|p| &p["name"])
        .collect();
    for e in arr_at(&sm, "/spec/endpoints", &sm_file) {
        assert!(
            ports.contains(&&e["port"]),
            "{sm_file}: port {} is not a port name of the Service",
            e["port"]
        );
        let path = str_at(e, "/path", &sm_file);
        assert!(
            is_metrics_route(path),
            "{sm_file}: slate serves no metrics at {path}"
        );
        let secret = str_at(e, "/authorization/credentials/name", &sm_file);
        let key = str_at(e, "/authorization/credentials/key", &sm_file);
        assert_eq!(
            key, "SLATE_API_TOKEN",
            "{sm_file}: /metrics needs the listener's token"
        );
        let s = object("secret.example.yaml", "Secret", secret);
        assert!(
            s["stringData"][key].is_string(),
            "{sm_file}: {secret} has no {key}"
        );
    }
}

#[test]
fn the_systemd_template_runs_n_workers_on_postgresql() {
    let rel = format!("{SYSTEMD}/slate@.service");
    let u = unit(&rel);
    let exec = unit_value(&u, "Service", "ExecStart");
    assert!(
        exec.contains("%i"),
        "{rel}: ExecStart does not use the instance (%i): every instance would listen on one port"
    );
    let single = unit_value(
        &unit(&format!("{SYSTEMD}/slate.service")),
        "Service",
        "ExecStart",
    );
    let mut ports = BTreeSet::new();
    for n in 1..=99 {
        let line: Vec<String> = exec
            .replace("%i", &n.to_string())
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let config = config_arg(&line, &rel);
        assert_eq!(
            config,
            config_arg(
                &single
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
                &rel
            ),
            "{rel}: the workers run the config of slate.service"
        );
        let Command::Sync(args) = Cli::try_parse_from(&line).expect("parsed").command else {
            unreachable!()
        };
        assert!(
            args.db.is_none(),
            "{rel}: --db on the command line shows the password"
        );
        let listen = args
            .listen
            .unwrap_or_else(|| panic!("{rel}: no --listen: instances share the config's port"));
        let addr: SocketAddr = listen
            .parse()
            .unwrap_or_else(|_| panic!("{rel}: instance {n}: --listen {listen} is not an address"));
        assert!(
            addr.ip().is_loopback(),
            "{rel}: instance {n} listens on {addr}: keep it on loopback (no token needed)"
        );
        assert!(
            ports.insert(addr.port()),
            "{rel}: instance {n} listens on port {}, as another instance does",
            addr.port()
        );
    }
    let ident = unit_value(&u, "Service", "SyslogIdentifier");
    assert!(
        ident.contains("%i"),
        "{rel}: SyslogIdentifier={ident} lacks the instance"
    );
    let files = u
        .get(&("Service".into(), "EnvironmentFile".into()))
        .unwrap_or_else(|| panic!("{rel}: no EnvironmentFile="));
    assert!(
        files.iter().any(|f| f == "-/etc/slate/credentials.env"),
        "{rel}: the credentials file of slate.service"
    );
    let db_file = files
        .iter()
        .find(|f| f.ends_with("/workers.env"))
        .unwrap_or_else(|| panic!("{rel}: no EnvironmentFile=/etc/slate/workers.env (SLATE_DB)"));
    assert!(
        !db_file.starts_with('-'),
        "{rel}: {db_file}: optional, so an instance would start without its database"
    );
    assert!(
        !u.contains_key(&("Service".into(), "StateDirectory".into())),
        "{rel}: StateDirectory=: the workers' state is in PostgreSQL; a writable directory lets \
         an instance without SLATE_DB open a SQLite file of its own"
    );
    let stop: u64 = unit_value(&u, "Service", "TimeoutStopSec")
        .trim_end_matches('s')
        .parse()
        .expect("TimeoutStopSec in seconds");
    let drain = shutdown_grace_secs();
    assert!(
        stop >= drain + 10,
        "{rel}: TimeoutStopSec={stop}: slate drains for up to {drain} s"
    );
    for &(key, want) in UNIT_SETTINGS {
        assert_eq!(
            unit_value(&u, "Service", key),
            want,
            "{rel}: [Service] {key}= should be '{want}'"
        );
    }
    let user = unit_value(&u, "Service", "User");
    assert_ne!(user, "root", "{rel}: User=root");
    assert_eq!(unit_value(&u, "Install", "WantedBy"), "multi-user.target");

    // the environment file: only variables slate reads, the URL a PostgreSQL placeholder
    let env_rel = format!("{SYSTEMD}/workers.env.example");
    let env = env_file(&env_rel);
    let known = env_vars_slate_reads();
    for k in env.keys() {
        assert!(
            known.contains(k),
            "{env_rel}: {k} is not a variable slate reads"
        );
    }
    let url = env
        .get("SLATE_DB")
        .unwrap_or_else(|| panic!("{env_rel}: no SLATE_DB"));
    check_db_url(url, &env_rel);
}
