//! Command-line flags, each with an environment fallback. A bad value stops
//! the start with clap's message, which names the flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::index::Resource;

/// Read-only Prometheus exporter for CAPTF state-lock Leases.
#[derive(Debug, Parser)]
#[command(name = "captf-lock-exporter", version, about, long_about = None)]
pub struct Cli {
    /// What to run (default: run against a cluster).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Kubeconfig file; without it the usual inference applies (KUBECONFIG,
    /// ~/.kube/config, then in-cluster).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_KUBECONFIG", value_parser = existing_file, global = true)]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_CONTEXT", global = true)]
    pub context: Option<String>,

    /// Namespaces to watch, comma-separated; empty means all namespaces.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_NAMESPACES", value_delimiter = ',', value_parser = namespace, global = true)]
    pub namespaces: Vec<String>,

    /// Address of the HTTP server (/metrics, /healthz, /readyz, /).
    #[arg(
        long,
        env = "CAPTF_LOCK_EXPORTER_LISTEN_ADDRESS",
        default_value = "0.0.0.0:9820",
        global = true
    )]
    pub listen_address: SocketAddr,

    /// Log format.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log level or tracing filter (e.g. info, debug, captf_lock_exporter=debug).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_LOG_LEVEL", default_value = "info", value_parser = log_filter, global = true)]
    pub log_level: String,

    /// How often unresolved holder pods are read again (e.g. 10s, 1m).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_POD_RECHECK_INTERVAL", default_value = "10s", value_parser = positive_duration, global = true)]
    pub pod_recheck_interval: Duration,

    /// Most live holder-pod reads per second (they confirm stale verdicts;
    /// only own runner pods are ever read).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_POD_READ_RATE", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000), global = true)]
    pub pod_read_rate: u32,

    /// How long CAPTF's own StateReadable verdict may disagree with the
    /// exporter's, with no Job of the object active, before
    /// captf_state_lock_verdict_mismatch turns 1 (e.g. 10m). CAPTF checks
    /// the lock only between Jobs and at a reconcile, so it lags.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_VERDICT_GRACE", default_value = "10m", value_parser = positive_duration, global = true)]
    pub verdict_grace: Duration,

    /// Also export captf_state_lock_age_seconds (off by default: the age
    /// moves with the clock, so the body would change every second; the
    /// shipped rules and dashboards use time() - acquired_timestamp).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_EXPORT_LOCK_AGE", global = true)]
    pub export_lock_age: bool,

    /// Also export the per-object series of idle objects (no held lock, no
    /// force-unlock seen, no verdict mismatch, no pending plan): held 0,
    /// their timeouts, CAPTF's condition. Off by default: an idle object
    /// says nothing, and its series cost the Prometheus that stores them
    /// several samples per object and scrape (docs/decisions/series-that-say-something.md).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_EXPORT_IDLE_OBJECTS", global = true)]
    pub export_idle_objects: bool,

    /// Resources not to watch, comma-separated, named as in the `resource`
    /// label (e.g. terraformmachinepools where that CRD is not installed).
    /// A skipped resource exports no watch series and does not hold back
    /// /readyz, so a kind the cluster does not serve stops
    /// CAPTFLockExporterWatchDown. `leases` (the locks) cannot be skipped.
    /// An empty value skips nothing (a chart may set the variable empty).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_SKIP_RESOURCES", value_parser = skip_list, default_value = "", hide_default_value = true, global = true)]
    pub skip_resources: SkipList,

    /// Start every watch with one streaming watch-list
    /// (`sendInitialEvents=true`) where the API server streams them, as
    /// client-go does; a server that does not is listed in pages (chosen
    /// once, logged, counted in watch_syncs_total{mode}). `false` always
    /// lists in pages.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_WATCH_LIST", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub watch_list: bool,

    /// Ask the API server for protobuf on watches of built-in kinds (the
    /// lock Leases), as client-go components do: it costs the server
    /// about a third of JSON to encode. Custom resources are JSON either
    /// way, and an answer in JSON (a proxy, a server without protobuf) is
    /// read as JSON. `false` asks for JSON everywhere.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_API_PROTOBUF", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub api_protobuf: bool,

    /// The least server-side timeout of a watch; each watch asks for a
    /// random time between this and twice it (client-go: 5m). A watch at
    /// rest is re-opened that often: an RBAC rule removed shows when the
    /// next one is refused. A dead or hung watch is found sooner, by
    /// HTTP/2 pings and a 75 s silence limit (kube-apiserver sends a
    /// bookmark every minute).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_WATCH_TIMEOUT", default_value = "5m", value_parser = watch_timeout, global = true)]
    pub watch_timeout: Duration,

    /// Serve plain HTTP instead of HTTPS: for a trusted network, or when
    /// TLS ends in front of the exporter (a proxy in the pod). The demo
    /// always serves plain HTTP.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_PLAIN_HTTP", global = true)]
    pub plain_http: bool,

    /// PEM certificate chain for HTTPS, leaf first; read again when it
    /// changes (cert-manager rotates it in place). Without it a
    /// self-signed certificate is made at start.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_TLS_CERT_FILE", value_parser = existing_file, requires = "tls_key_file", conflicts_with = "plain_http", global = true)]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_TLS_KEY_FILE", value_parser = existing_file, requires = "tls_cert_file", conflicts_with = "plain_http", global = true)]
    pub tls_key_file: Option<PathBuf>,

    /// Who may read /metrics, / and /locks/...: `kubernetes` (a bearer
    /// token checked with a TokenReview, then `get` on the path checked
    /// with a SubjectAccessReview; the default) or `none` (anyone who can
    /// reach the port). /healthz and /readyz are always open.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_AUTH", value_enum, global = true)]
    pub auth: Option<AuthMode>,

    /// With --auth=kubernetes, accept only bearer tokens issued for one of
    /// these audiences, comma-separated (sent as the TokenReview's
    /// spec.audiences; the answer must name one of them), e.g. a projected
    /// ServiceAccount token minted for the exporter. Empty: the API
    /// server's own audiences (an ordinary ServiceAccount token).
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_AUTH_AUDIENCES", value_parser = audiences, default_value = "", hide_default_value = true, global = true)]
    pub auth_audiences: Audiences,

    /// With --auth=kubernetes, check `get` on a subresource of this
    /// Service, <namespace>/<name> (the exporter's own), instead of `get`
    /// on the path as a non-resource URL: `services/metrics` for /metrics,
    /// `services/pages` for / and /locks/..., as kube-rbac-proxy's
    /// resourceAttributes do. RBAC then grants each with a Role in that
    /// namespace naming the Service. Empty: the non-resource paths.
    #[arg(long, env = "CAPTF_LOCK_EXPORTER_AUTH_SERVICE", value_parser = crate::server::auth::AuthService::parse, default_value = "", hide_default_value = true, global = true)]
    pub auth_service: crate::server::auth::AuthService,
}

/// The audiences `--auth-audiences` names, each once, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audiences(pub Vec<String>);

/// `--auth-audiences`: comma-separated, blanks around names and empty
/// entries ignored (a chart may set the variable empty). An audience is
/// compared byte for byte, so blanks or control characters inside one are
/// a mistake, refused rather than never matched.
fn audiences(s: &str) -> Result<Audiences, String> {
    let mut list: Vec<String> = Vec::new();
    for a in s.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if a.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{a:?}: an audience has no blanks or control characters"
            ));
        }
        if a.len() > 1024 {
            return Err("an audience is at most 1024 bytes".into());
        }
        if !list.iter().any(|x| x == a) {
            list.push(a.to_string());
        }
    }
    Ok(Audiences(list))
}

/// `--auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// TokenReview and SubjectAccessReview, as the API server decides.
    Kubernetes,
    /// No authentication: anyone who reaches the port reads everything.
    None,
}

/// Subcommands.
#[derive(Debug, Subcommand, Clone, PartialEq, Eq)]
pub enum Command {
    /// Watch a real cluster (the default).
    Run,
    /// Run the same pipeline on an embedded simulated cluster; no Kubernetes needed.
    Demo,
    /// List the held state locks once, most urgent first (GET only).
    Locks(LocksArgs),
    /// Explain one object's state lock: the evidence and the runbook's fix (GET only).
    Explain(ExplainArgs),
}

/// `locks` options (kubectl's conventions).
#[derive(Debug, clap::Args, Clone, PartialEq, Eq)]
pub struct LocksArgs {
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace", value_parser = namespace, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Exit 1 when a foreign or unknown lock is past its lockTimeoutSeconds.
    #[arg(long)]
    pub fail_on_overdue: bool,
}

/// `explain` options.
#[derive(Debug, clap::Args, Clone, PartialEq, Eq)]
pub struct ExplainArgs {
    /// KIND/NAME, KIND as kubectl takes it (terraformmachine, TerraformMachine, terraformmachines, tfm, ...).
    pub target: String,
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace", value_parser = namespace)]
    pub namespace: Option<String>,
    /// The image repository whose images the printed fix may run (a value
    /// ending in '/' trusts every repository under it). The object's pinned
    /// image comes from a Secret anyone who may update Secrets in the
    /// namespace can rewrite: any other repository is refused, with a warning.
    #[arg(long, value_name = "REPOSITORY", default_value = crate::oncall::image::DEFAULT_RUNNER_IMAGE_REPOSITORY)]
    pub runner_image_repository: String,
}

/// `locks -o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns.
    Table,
    /// More columns: lock ID, Lease, deadline, timeout source, the holder
    /// pod's node and whether it is lost (node_unreachable, ...).
    Wide,
    /// JSON for scripts.
    Json,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn existing_file(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("no such file: {s}"))
    }
}

/// A namespace name: a DNS-1123 label.
impl Cli {
    /// The watch scopes: every namespace of `--namespaces` once, in the
    /// order given, or one cluster-wide scope (None) when none is given.
    /// A namespace named twice would otherwise be watched twice and its
    /// objects relisted by two watches that each reset the other's view.
    pub fn watch_scopes(&self) -> Vec<Option<String>> {
        if self.namespaces.is_empty() {
            return vec![None];
        }
        let mut seen = std::collections::HashSet::new();
        self.namespaces
            .iter()
            .filter(|n| seen.insert(n.as_str()))
            .cloned()
            .map(Some)
            .collect()
    }
}

/// The resources `--skip-resources` names, each once, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipList(pub Vec<Resource>);

impl Cli {
    /// The resources to watch: every one of [`Resource::ALL`] (in its
    /// order) that `--skip-resources` does not name; with `--namespaces`,
    /// none that is cluster-scoped (Nodes): a namespaced exporter sends
    /// only namespaced requests, and judges lost nodes on pod evidence.
    pub fn watched_resources(&self) -> Vec<Resource> {
        Resource::ALL
            .into_iter()
            .filter(|r| !self.skip_resources.0.contains(r))
            .filter(|r| self.namespaces.is_empty() || !r.cluster_scoped())
            .collect()
    }
}

/// `--skip-resources`: comma-separated, blanks around names and empty
/// entries ignored, so an empty value skips nothing.
fn skip_list(s: &str) -> Result<SkipList, String> {
    let mut list = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let r = skippable_resource(name)?;
        if !list.contains(&r) {
            list.push(r);
        }
    }
    Ok(SkipList(list))
}

/// One value of `--skip-resources`: a watched resource's label value,
/// other than `leases`.
fn skippable_resource(s: &str) -> Result<Resource, String> {
    let s = s.trim();
    let names = || {
        Resource::ALL
            .iter()
            .filter(|r| **r != Resource::Leases)
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match Resource::ALL.into_iter().find(|r| r.as_str() == s) {
        Some(Resource::Leases) => Err(
            "leases cannot be skipped: the state locks are Leases, and without them the exporter reports nothing"
                .to_string(),
        ),
        Some(r) => Ok(r),
        None => Err(format!(
            "{s:?} is not a watched resource (one of: {})",
            names()
        )),
    }
}

fn namespace(s: &str) -> Result<String, String> {
    let s = s.trim();
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
        ))
    }
}

fn log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// A watch timeout: whole seconds from 30 s to 30 min (past that, a
/// proxy or load balancer in front of the API server is likely to cut
/// the watch first).
fn watch_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(30) || d > Duration::from_secs(1800) {
        return Err("must be between 30s and 30m".into());
    }
    Ok(Duration::from_secs(d.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_list_and_watch_timeout_defaults_and_bounds() {
        let cli = Cli::try_parse_from(["x", "demo"]).expect("parses");
        assert!(cli.watch_list);
        assert!(cli.api_protobuf);
        assert_eq!(cli.watch_timeout, Duration::from_secs(300));
        let cli = Cli::try_parse_from([
            "x",
            "--watch-list",
            "false",
            "--watch-timeout",
            "45s",
            "demo",
        ])
        .expect("parses");
        assert!(!cli.watch_list);
        assert_eq!(cli.watch_timeout, Duration::from_secs(45));
        assert!(err_of(&["--watch-timeout", "10s"]).contains("--watch-timeout"));
        assert!(err_of(&["--api-protobuf", "maybe"]).contains("--api-protobuf"));
        assert!(err_of(&["--watch-timeout", "1h"]).contains("between 30s and 30m"));
    }

    fn err_of(args: &[&str]) -> String {
        let mut full = vec!["captf-lock-exporter"];
        full.extend_from_slice(args);
        Cli::try_parse_from(full)
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn bad_values_name_their_flag() {
        assert!(err_of(&["--auth-service", "Bad/svc"]).contains("--auth-service"));
        assert!(err_of(&["--auth-service", "ns"]).contains("--auth-service"));
        assert!(err_of(&["--listen-address", "nope"]).contains("--listen-address"));
        assert!(err_of(&["--log-format", "xml"]).contains("--log-format"));
        assert!(err_of(&["--log-level", "info,=[bad"]).contains("--log-level"));
        assert!(err_of(&["--namespaces", "ok,Not_OK"]).contains("--namespaces"));
        assert!(err_of(&["--pod-recheck-interval", "0s"]).contains("--pod-recheck-interval"));
        assert!(err_of(&["--pod-recheck-interval", "soon"]).contains("--pod-recheck-interval"));
        assert!(err_of(&["--kubeconfig", "/nonexistent/kubeconfig"]).contains("--kubeconfig"));
        assert!(err_of(&["--verdict-grace", "0s"]).contains("--verdict-grace"));
        assert!(err_of(&["--verdict-grace", "a while"]).contains("--verdict-grace"));
        for bad in [
            "leases",
            "pods,leases",
            "terraformmachine",
            "Pods",
            "pods,lease",
        ] {
            assert!(
                err_of(&["--skip-resources", bad]).contains("--skip-resources"),
                "{bad}: {}",
                err_of(&["--skip-resources", bad])
            );
        }
        assert!(err_of(&["--skip-resources", "leases"]).contains("leases cannot be skipped"));
        for bad in ["a b", "ok,x\ty", "\u{1b}[1m"] {
            let err = err_of(&["--auth-audiences", bad]);
            assert!(err.contains("--auth-audiences"), "{bad:?}: {err}");
        }
        assert!(err_of(&["--auth-audiences", &"a".repeat(1025)]).contains("--auth-audiences"));
    }

    #[test]
    fn audiences_default_to_none_and_keep_their_order() {
        let cli = Cli::try_parse_from(["x", "demo"]).expect("parses");
        assert_eq!(cli.auth_audiences, Audiences::default());
        let cli = Cli::try_parse_from([
            "x",
            "--auth-audiences",
            " captf-lock-exporter,,https://kubernetes.default.svc, captf-lock-exporter",
            "demo",
        ])
        .expect("parses");
        assert_eq!(
            cli.auth_audiences.0,
            ["captf-lock-exporter", "https://kubernetes.default.svc"]
        );
    }

    #[test]
    fn skipped_resources_are_not_watched_and_the_rest_keep_their_order() {
        let cli = Cli::try_parse_from(["x", "demo"]).expect("parses");
        assert_eq!(cli.skip_resources, SkipList::default());
        assert_eq!(cli.watched_resources(), Resource::ALL.to_vec());
        for empty in ["", " ", ","] {
            let cli =
                Cli::try_parse_from(["x", "--skip-resources", empty, "demo"]).expect("parses");
            assert_eq!(cli.watched_resources(), Resource::ALL.to_vec(), "{empty:?}");
        }
        let cli = Cli::try_parse_from([
            "x",
            "--skip-resources",
            "terraformmachinepools, clusters,,terraformmachinepools",
            "demo",
        ])
        .expect("parses");
        let watched = cli.watched_resources();
        assert_eq!(watched.len(), Resource::ALL.len() - 2);
        assert!(!watched.contains(&Resource::TerraformMachinePools));
        assert!(!watched.contains(&Resource::Clusters));
        assert_eq!(watched.first(), Some(&Resource::Leases));
        let mut sorted = watched.clone();
        sorted.sort();
        assert_eq!(watched, sorted, "Resource::ALL order");
    }

    #[test]
    fn defaults_and_lists() {
        let cli = Cli::try_parse_from(["x", "--namespaces", "a,b-2", "demo"]).expect("parses");
        assert_eq!(cli.namespaces, vec!["a", "b-2"]);
        let cli = Cli::try_parse_from(["x", "--namespaces", "b,a, b,a", "demo"]).expect("parses");
        assert_eq!(
            cli.watch_scopes(),
            vec![Some("b".to_string()), Some("a".to_string())],
            "each namespace is watched once"
        );
        assert!(
            !cli.watched_resources().contains(&Resource::Nodes),
            "a namespaced exporter reads nothing cluster-scoped"
        );
        let cli = Cli::try_parse_from(["x", "demo"]).expect("parses");
        assert_eq!(cli.watch_scopes(), vec![None]);
        assert!(cli.watched_resources().contains(&Resource::Nodes));
        assert_eq!(cli.command, Some(Command::Demo));
        assert_eq!(cli.listen_address.port(), 9820);
        assert_eq!(cli.pod_recheck_interval, Duration::from_secs(10));
        assert_eq!(cli.verdict_grace, Duration::from_secs(600));
    }
}
