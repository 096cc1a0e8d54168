//! The binary: reads the flags, then either runs one on-call command
//! (`locks`, `explain`) and exits, or serves: binds the endpoint first (a
//! taken port fails at once), builds the API client (or the in-process
//! demo cluster), and starts the watchers, pod reads, deadlines and the
//! HTTP server under one supervisor until SIGTERM or Ctrl-C. What it
//! exports and why: the README and docs/architecture.md.

use std::process::ExitCode;

use std::sync::Arc;

use captf_lock_exporter::cli::{Cli, Command, LogFormat};
use captf_lock_exporter::client::{self, ApiLink};
use captf_lock_exporter::shared::Shared;
use captf_lock_exporter::supervise::{Stopped, Supervisor};
use captf_lock_exporter::watch::Timing;
use captf_lock_exporter::{demo, pod_reads, server, watch};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

fn init_tracing(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Why the exporter could not start, or stopped.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot read --kubeconfig {path}: {source}")]
    ReadKubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot use --kubeconfig {path}: {source}")]
    UseKubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes configuration (pass --kubeconfig, or run in a pod): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] captf_lock_exporter::client::ClientError),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error(transparent)]
    Tls(#[from] server::tls::TlsError),
    #[error("the demo serves plain HTTP without authentication (it has no API server to review tokens): {0} cannot be used with demo")]
    DemoEndpoint(&'static str),
    #[error("--auth-audiences needs --auth kubernetes: with --auth none no token is checked")]
    AudiencesWithoutAuth,
    #[error("--auth-service needs --auth kubernetes: with --auth none no access is checked")]
    ServiceWithoutAuth,
    #[error("{0}; exiting so that the exporter is restarted")]
    Stopped(#[from] Stopped),
}

async fn client(cli: &Cli, link: Arc<ApiLink>) -> Result<kube::Client, StartError> {
    let config = match &cli.kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let kc = Kubeconfig::read_from(path).map_err(|source| StartError::ReadKubeconfig {
                path: shown.clone(),
                source,
            })?;
            let opts = KubeConfigOptions {
                context: cli.context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|source| StartError::UseKubeconfig {
                    path: shown,
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(StartError::Infer)?,
    };
    client::build(config, link, client::Tuning::DEFAULT).map_err(StartError::Client)
}

async fn run(cli: Cli) -> Result<(), StartError> {
    let (shared, confirm_rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    let grace = cli.verdict_grace;
    shared.write(|ix, _| ix.set_verdict_grace(grace));
    let listener = server::bind(cli.listen_address).await?;
    let mut tasks = Supervisor::new();
    // A bad certificate fails the start before any connection is made.
    let transport = transport(&cli, &shared, &mut tasks)?;
    let client = match cli.command.clone().unwrap_or(Command::Run) {
        Command::Locks(_) | Command::Explain(_) => return Ok(()),
        Command::Run => client(&cli, ctx.api.clone()).await?,
        Command::Demo => {
            let (client, simulation) = demo::start();
            tasks.spawn("demo simulation", simulation);
            tracing::info!(
                "demo mode: the Kubernetes client talks to a simulated API server in this process; no cluster is contacted"
            );
            client
        }
    };
    let endpoint = endpoint(&cli, transport, &client);
    // From here on, production and demo run the same code.
    let scopes = cli.watch_scopes();
    let resources = cli.watched_resources();
    if !cli.skip_resources.0.is_empty() {
        let skipped: Vec<&str> = cli.skip_resources.0.iter().map(|r| r.as_str()).collect();
        tracing::info!(
            skipped = skipped.join(","),
            "--skip-resources: these resources are not watched and export no watch series"
        );
    }
    let nodes = captf_lock_exporter::index::Resource::Nodes;
    if !cli.namespaces.is_empty() && !cli.skip_resources.0.contains(&nodes) {
        tracing::info!(
            "--namespaces: Nodes (cluster-scoped) are not watched; whether a lock's runner is on a lost node is judged from its pod alone (pod_terminating_past_grace)"
        );
    }
    if !cli.watch_list {
        ctx.watch_list.disable();
        tracing::info!("--watch-list=false: every watch lists in pages");
    }
    if !cli.api_protobuf {
        ctx.wire.json_only();
        tracing::info!("--api-protobuf=false: every watch asks for JSON");
    }
    let timing = Timing {
        watch_timeout: cli.watch_timeout,
        ..Timing::DEFAULT
    };
    // No lock is judged overdue until every kind its timeout comes from
    // has synced (the overdue checker says when).
    shared.write(|ix, _| ix.begin_start());
    let watches = watch::watches(
        client.clone(),
        shared.clone(),
        ctx.clone(),
        scopes,
        &resources,
        timing,
    );
    for (name, watch) in watches {
        tasks.spawn(name, watch);
    }
    tasks.spawn(
        "overdue checker",
        captf_lock_exporter::deadlines::run(shared.clone(), std::time::Duration::from_secs(1)),
    );
    tasks.spawn(
        "pod verifier",
        pod_reads::run(
            shared.clone(),
            client,
            ctx.api.clone(),
            confirm_rx,
            cli.pod_recheck_interval,
            cli.pod_read_rate,
        ),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tasks.spawn(
        "http server",
        server::serve(
            listener,
            shared.clone(),
            captf_lock_exporter::metrics::Exposition {
                lock_age: cli.export_lock_age,
                idle_objects: cli.export_idle_objects,
            },
            endpoint,
            stop_rx,
        ),
    );
    tracing::info!(address = %cli.listen_address, version = captf_lock_exporter::VERSION, "serving /metrics, /healthz, /readyz");
    tokio::select! {
        stopped = tasks.first_stop() => return Err(StartError::Stopped(stopped)),
        _ = shutdown_signal() => {}
    }
    tracing::info!("shutting down: no new connections, finishing responses in flight");
    let _ = stop_tx.send(true);
    // The server returns once its connections are closed, within its drain
    // period; the other tasks run forever and are dropped with the runtime.
    let drain = server::Config::DEFAULT.drain + std::time::Duration::from_secs(1);
    let _ = tokio::time::timeout(drain, tasks.first_stop()).await;
    Ok(())
}

/// How the endpoint is served: plain, or TLS with the certificate loaded
/// (and watched) now. The demo is always plain; asking it for TLS or
/// authentication fails the start, naming the flag.
fn transport(
    cli: &Cli,
    shared: &Arc<Shared>,
    tasks: &mut Supervisor,
) -> Result<server::Transport, StartError> {
    use captf_lock_exporter::cli::AuthMode;
    use captf_lock_exporter::health::Outcome;
    use server::tls::{Certificates, Reload, Source};
    if cli.command == Some(Command::Demo) {
        if cli.tls_cert_file.is_some() {
            return Err(StartError::DemoEndpoint("--tls-cert-file"));
        }
        if cli.auth == Some(AuthMode::Kubernetes) {
            return Err(StartError::DemoEndpoint("--auth kubernetes"));
        }
        if !cli.auth_audiences.0.is_empty() {
            return Err(StartError::DemoEndpoint("--auth-audiences"));
        }
        if cli.auth_service.0.is_some() {
            return Err(StartError::DemoEndpoint("--auth-service"));
        }
        return Ok(server::Transport::Plain);
    }
    if cli.auth == Some(AuthMode::None) && !cli.auth_audiences.0.is_empty() {
        return Err(StartError::AudiencesWithoutAuth);
    }
    if cli.auth == Some(AuthMode::None) && cli.auth_service.0.is_some() {
        return Err(StartError::ServiceWithoutAuth);
    }
    if cli.plain_http {
        return Ok(server::Transport::Plain);
    }
    let source = match (&cli.tls_cert_file, &cli.tls_key_file) {
        (Some(cert), Some(key)) => Source::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ => Source::SelfSigned {
            names: self_signed_names(cli),
        },
    };
    let certs = Certificates::load(source)?;
    // The accept loop builds the same settings; a failure shows here.
    certs.server_config()?;
    let counted = shared.clone();
    tasks.spawn(
        "certificate watcher",
        certs.clone().watch(RELOAD_EVERY, move |r| {
            counted.health.on_tls_reload(match r {
                Reload::Replaced | Reload::Unchanged => Outcome::Ok,
                Reload::Failed => Outcome::Error,
            });
        }),
    );
    Ok(server::Transport::Tls(certs))
}

/// Who may read the endpoint, from the flags; logged once, since an
/// operator must be able to tell from the log whether lock holders are
/// readable by anyone who reaches the port.
fn endpoint(cli: &Cli, transport: server::Transport, client: &kube::Client) -> server::Endpoint {
    use captf_lock_exporter::cli::AuthMode;
    use server::auth::{Guard, KubeReviewer};
    if cli.command == Some(Command::Demo) {
        tracing::info!("demo: plain HTTP, no authentication");
        return server::Endpoint::open_plain();
    }
    let guard = match cli.auth.unwrap_or(AuthMode::Kubernetes) {
        AuthMode::Kubernetes => Guard::kubernetes(Arc::new(
            KubeReviewer::new(client.clone())
                .with_audiences(cli.auth_audiences.0.clone())
                .with_service(cli.auth_service.0.clone()),
        )),
        AuthMode::None => Guard::Open,
    };
    let scheme = match &transport {
        server::Transport::Plain => "plain HTTP".to_string(),
        server::Transport::Tls(c) => format!("HTTPS (TLS 1.2+, {})", c.source()),
    };
    if matches!(guard, Guard::Kubernetes(_)) && !cli.auth_audiences.0.is_empty() {
        tracing::info!(
            audiences = cli.auth_audiences.0.join(","),
            "endpoint: bearer tokens must be issued for one of these audiences (--auth-audiences)"
        );
    }
    if let (Guard::Kubernetes(_), Some(svc)) = (&guard, &cli.auth_service.0) {
        tracing::info!(
            namespace = svc.namespace,
            service = svc.name,
            "endpoint: RBAC get on services/metrics (for /metrics) and services/pages (for / and /locks/...) of this Service is checked instead of the non-resource paths (--auth-service)"
        );
    }
    match (&guard, &transport) {
        (Guard::Kubernetes(_), server::Transport::Tls(_)) => tracing::info!(
            "endpoint: {scheme}; /metrics, / and /locks/... need a bearer token the API server accepts (TokenReview) and RBAC get on the path (SubjectAccessReview); /healthz and /readyz are open"
        ),
        (Guard::Kubernetes(_), server::Transport::Plain) => tracing::warn!(
            "endpoint: {scheme} with token authentication: bearer tokens cross the network in the clear unless TLS ends in front of the exporter"
        ),
        (Guard::Open, _) => tracing::warn!(
            "endpoint: {scheme}, --auth none: anyone who can reach the port reads lock holders, lock IDs and the commands to release them"
        ),
    }
    server::Endpoint { transport, guard }
}

/// How often the certificate files are looked at (controller-runtime's
/// certificate watcher polls as often).
const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Names in a self-signed certificate besides localhost: the host name
/// (the pod name in a pod) and the listen address when it is specific.
fn self_signed_names(cli: &Cli) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    let ip = cli.listen_address.ip();
    if !ip.is_unspecified() {
        names.push(ip.to_string());
    }
    names
}

/// `locks` and `explain`: one read of the kubeconfig's cluster, printed.
async fn oncall_command(cli: &Cli) -> ExitCode {
    use captf_lock_exporter::cli::OutputFormat;
    use captf_lock_exporter::oncall::{self, render::Output, EXIT_ERROR};
    let client = match client(cli, Arc::new(ApiLink::new())).await {
        Ok(c) => c,
        Err(err) => {
            eprintln!("captf-lock-exporter: {err}");
            return ExitCode::from(EXIT_ERROR as u8);
        }
    };
    let default_ns = client.default_namespace().to_string();
    let (mut out, mut err) = (String::new(), String::new());
    let code = match &cli.command {
        Some(Command::Locks(a)) => {
            let scope = if a.all_namespaces {
                None
            } else {
                Some(a.namespace.clone().unwrap_or(default_ns))
            };
            let output = match a.output {
                OutputFormat::Table => Output::Table,
                OutputFormat::Wide => Output::Wide,
                OutputFormat::Json => Output::Json,
            };
            oncall::locks(
                &client,
                scope.as_deref(),
                output,
                a.fail_on_overdue,
                &mut out,
                &mut err,
            )
            .await
        }
        Some(Command::Explain(a)) => {
            let ns = a.namespace.clone().unwrap_or(default_ns);
            oncall::explain(
                &client,
                &a.target,
                &ns,
                &a.runner_image_repository,
                &mut out,
                &mut err,
            )
            .await
        }
        _ => EXIT_ERROR,
    };
    print!("{out}");
    eprint!("{err}");
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Fixes glibc's mmap threshold at 128 KiB. glibc raises the threshold
/// whenever a large mmapped block is freed; from then on a relist's pages
/// and the exposition come from the heap, which keeps what is freed, so RSS
/// climbs a step at every relist. With the threshold fixed, large blocks
/// stay mmapped and go back to the system when freed. The soak's figures
/// before and after: tools/soak/README.md.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_mmap_threshold() {
    // SAFETY: mallopt only sets an allocator parameter; it is called once,
    // before any other thread exists.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
    if ok != 1 {
        eprintln!("captf-lock-exporter: mallopt(M_MMAP_THRESHOLD) failed; memory may grow in steps at relists");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold() {}

fn main() -> ExitCode {
    fix_mmap_threshold();
    let cli = Cli::parse();
    init_tracing(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("captf-lock-exporter: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(Command::Locks(_) | Command::Explain(_)) = &cli.command {
        return runtime.block_on(oncall_command(&cli));
    }
    let result = runtime.block_on(run(cli));
    // A render still running on a blocking thread must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err}");
            eprintln!("captf-lock-exporter: {err}");
            ExitCode::FAILURE
        }
    }
}
