//! The pinned-image variant of the foreign-lock fix, and the check that
//! keeps it from running an image someone else chose.
//!
//! The image comes from the `captf.io/image-digest` annotation of the
//! object's applied-inputs Secret (or the object's status): whoever may
//! update Secrets in the namespace can rewrite it, and the fix runs it
//! with credentials that may update Leases and Secrets there. So it is
//! printed only when its repository is one `--runner-image-repository`
//! trusts, with a short-lived token of a namespaced ServiceAccount, never
//! a mounted kubeconfig; otherwise a warning says why nothing runs it.
//! docs/decisions/oncall-output.md has the inputs tried.

use std::fmt::Write as _;

use super::commands::Holder;
use super::model::{LockReport, Lookup};
use super::shell::{show, shq};

/// The default of `--runner-image-repository`: the registry path CAPTF
/// publishes its images under (the provider's `RELEASE_REPO`, the module
/// images' and base images' `REGISTRY`).
pub const DEFAULT_RUNNER_IMAGE_REPOSITORY: &str = "ghcr.io/captf-io/";

/// The repository of an image reference: the digest and the tag dropped.
pub fn repository(image: &str) -> &str {
    let repo = image.split('@').next().unwrap_or(image);
    match repo.rfind(':') {
        Some(i) if !repo[i..].contains('/') => &repo[..i],
        _ => repo,
    }
}

/// Whether `image` is pinned by digest and its repository is `trusted`
/// (a value ending in `/` trusts every repository under that path). A
/// repository with characters no image reference has is never trusted.
pub fn trusted(image: &str, trusted: &str) -> bool {
    let repo = repository(image);
    let well_formed = !repo.is_empty()
        && repo
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b))
        && !repo
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    let pinned = image
        .split_once('@')
        .is_some_and(|(_, d)| d.starts_with("sha256:") && d.len() > 7);
    let matches = if trusted.ends_with('/') {
        repo.starts_with(trusted)
    } else {
        repo == trusted
    };
    well_formed && pinned && !trusted.is_empty() && matches
}

/// Prints the pinned-image variant (trusted image), a warning (another
/// image) or why there is none. `image` is the lookup and the trusted
/// repository; `suffix` is already quoted, `holder` is the ID's argument
/// and the guarded read that comes before it.
pub fn image_variant(
    r: &LockReport,
    image: Option<(&Lookup, &str)>,
    suffix: &str,
    holder: &Holder,
    out: &mut String,
) {
    let (guard, hid) = (&holder.guard, &holder.word);
    let ns = shq(&r.namespace);
    let Some((lookup, repo_flag)) = image else {
        return;
    };
    let (value, from) = match lookup {
        // Where it came from names API errors: shown, like every value.
        Lookup::Found { value, from } => (value, show(from)),
        Lookup::Unreadable { why, .. } => {
            let why = show(why);
            let _ = writeln!(
                out,
                "     The object's pinned image could not be read, so no command here runs it ({why}):\n     use tofu or terraform as above."
            );
            return;
        }
    };
    if !trusted(value, repo_flag) {
        let _ = writeln!(
            out,
            "  WARNING: no command here runs the object's pinned image {}: its repository is not\n     {} (--runner-image-repository). The image comes from {from}, which\n     whoever may update Secrets in {ns} can rewrite, and it would run with credentials that\n     may update Leases and Secrets there. Use tofu or terraform as above. If you have\n     checked that image yourself, run explain again with --runner-image-repository {}.",
            shq(&show(value)),
            shq(repo_flag),
            shq(&show(repository(value)))
        );
        return;
    }
    let _ = writeln!(
        out,
        "     Without either tool, run the same two commands in the object's pinned image (from\n     {from}; in {}, which --runner-image-repository trusts), in the same root, with a\n     10-minute token of a ServiceAccount in {ns} that may get and update Leases and Secrets\n     there (the image never sees your kubeconfig; SA is yours to fill in):\n    IMAGE={}\n    SA='<service-account>'\n    export KUBE_TOKEN=\"$(kubectl create token \"$SA\" -n {ns} --duration=10m)\"\n    export KUBE_HOST=\"$(kubectl config view --minify -o jsonpath='{{.clusters[0].cluster.server}}')\"\n    export KUBE_CLUSTER_CA_CERT_DATA=\"$(kubectl config view --minify --raw -o jsonpath='{{.clusters[0].cluster.certificate-authority-data}}' | base64 -d)\"\n    docker run --rm --entrypoint /captf/runtime -e KUBE_TOKEN -e KUBE_HOST -e KUBE_CLUSTER_CA_CERT_DATA \\\n      -v \"$PWD/root:/captf/work/root\" -w /captf/work/root \\\n      \"$IMAGE\" init -input=false -no-color \\\n      -backend-config=secret_suffix={suffix} -backend-config=namespace={ns} \\\n      -backend-config=in_cluster_config=false -backend-config=\"labels=$LABELS\"\n\n    {guard}docker run --rm --entrypoint /captf/runtime -e KUBE_TOKEN -e KUBE_HOST -e KUBE_CLUSTER_CA_CERT_DATA \\\n      -v \"$PWD/root:/captf/work/root\" -w /captf/work/root \\\n      \"$IMAGE\" force-unlock -force -- {hid}",
        shq(repo_flag),
        shq(value),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef";

    #[test]
    fn repository_drops_tag_and_digest() {
        assert_eq!(
            repository("ghcr.io/captf-io/m:v1@sha256:ab"),
            "ghcr.io/captf-io/m"
        );
        assert_eq!(
            repository("reg:5000/captf-io/m@sha256:ab"),
            "reg:5000/captf-io/m"
        );
        assert_eq!(repository("reg:5000/m"), "reg:5000/m");
    }

    #[test]
    fn only_pinned_images_under_the_trusted_repository() {
        let t = DEFAULT_RUNNER_IMAGE_REPOSITORY;
        assert!(trusted(
            &format!("ghcr.io/captf-io/terraform-noop-machine@{D}"),
            t
        ));
        assert!(trusted(&format!("ghcr.io/ex/mod@{D}"), "ghcr.io/ex/mod"));
        for image in [
            format!("evil.example/x@{D}"),
            format!("ghcr.io/captf-io.evil/x@{D}"),
            format!("ghcr.io/captf-io@{D}"),
            format!("ghcr.io/captf-io/../evil/x@{D}"),
            format!("ghcr.io/captf-io//x@{D}"),
            format!("ghcr.io/captf-io/X\u{1b}@{D}"),
            "ghcr.io/captf-io/x:latest".to_string(),
            "ghcr.io/captf-io/x@sha256:".to_string(),
        ] {
            assert!(!trusted(&image, t), "{image}");
        }
        assert!(!trusted(&format!("ghcr.io/ex/mod2@{D}"), "ghcr.io/ex/mod"));
        assert!(!trusted(&format!("ghcr.io/ex/mod@{D}"), ""));
    }
}
