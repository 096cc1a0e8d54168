//! stub
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Apply,
    Destroy,
    Refresh,
    Drift,
    Restore,
    Plan,
}
impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Apply => "apply",
            Op::Destroy => "destroy",
            Op::Refresh => "refresh",
            Op::Drift => "drift",
            Op::Restore => "restore",
            Op::Plan => "plan",
        }
    }
}
pub const MAX_JOB_NAME_LEN: usize = 57;
pub fn job_name(kindshort: &str, name: &str, op: Op, attempt: i32, hash6: &str) -> String {
    format!(
        "captf-{kindshort}-{name}-{}-a{attempt}-{hash6}",
        op.as_str()
    )
}
pub fn owns_pod(kindshort: &str, name: &str, pod: &str) -> bool {
    pod.starts_with(&format!("captf-{kindshort}-{name}-"))
}
