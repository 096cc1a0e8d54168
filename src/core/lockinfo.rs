//! stub
use chrono::{DateTime, Utc};
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    pub id: String,
    pub operation: String,
    pub who: String,
    pub version: String,
    pub created: Option<DateTime<Utc>>,
}
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum LockInfoError {
    #[error("syntax")]
    Syntax,
}
#[derive(serde::Deserialize)]
struct Raw {
    #[serde(rename = "ID", default)]
    id: String,
    #[serde(rename = "Operation", default)]
    operation: String,
    #[serde(rename = "Who", default)]
    who: String,
    #[serde(rename = "Version", default)]
    version: String,
}
pub fn parse_lock_info(raw: &[u8]) -> Result<LockInfo, LockInfoError> {
    let r: Raw = serde_json::from_slice(raw).map_err(|_| LockInfoError::Syntax)?;
    Ok(LockInfo {
        id: r.id,
        operation: r.operation,
        who: r.who,
        version: r.version,
        created: None,
    })
}
pub fn holder_host(who: &str) -> Option<&str> {
    who.rfind('@')
        .map(|i| &who[i + 1..])
        .filter(|h| !h.is_empty())
}
