//! A bearer token read from a file, as client-go reads one: trimmed of
//! surrounding whitespace (`kubectl create token NAME > file` ends it with
//! a newline) and read again whenever the file changes (the kubelet
//! rotates projected ServiceAccount tokens by an atomic rename) or the
//! server refuses it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use http::HeaderValue;

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read.
    #[error("cannot read token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds nothing but whitespace, or bytes a header cannot carry.
    #[error("token file {path} holds no usable token ({why})")]
    Unusable {
        /// The file.
        path: String,
        /// Why.
        why: &'static str,
    },
}

/// What identifies one version of the file: a rename gives another inode,
/// an in-place write another size or modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    ino: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    // Follows symlinks: a projected token is `..data/token` behind links.
    let m = std::fs::metadata(path)?;
    Ok(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        #[cfg(unix)]
        ino: std::os::unix::fs::MetadataExt::ino(&m),
    })
}

#[derive(Debug, Default)]
struct Cached {
    header: Option<HeaderValue>,
    stamp: Option<Stamp>,
    /// The server refused the current token: read again even if the file
    /// looks the same.
    stale: bool,
}

/// A token file and the header it last gave.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    cached: Mutex<Cached>,
}

/// `Bearer <token>` from the file's text, trimmed.
pub fn bearer_header(text: &str, path: &str) -> Result<HeaderValue, TokenError> {
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenError::Unusable {
            path: path.to_string(),
            why: "empty",
        });
    }
    let mut v =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| TokenError::Unusable {
            path: path.to_string(),
            why: "bytes a header cannot carry",
        })?;
    v.set_sensitive(true);
    Ok(v)
}

impl TokenFile {
    /// Reads the token once, so a bad file stops the start with a clear
    /// error.
    pub fn open(path: PathBuf) -> Result<Self, TokenError> {
        let f = TokenFile {
            path,
            cached: Mutex::new(Cached::default()),
        };
        f.header()?;
        Ok(f)
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// The header to send: the cached one while the file is unchanged, else
    /// the file read again. A file that cannot be read now keeps the last
    /// good token (the next request tries again).
    pub fn header(&self) -> Result<HeaderValue, TokenError> {
        let mut c = match self.cached.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = stamp(&self.path).ok();
        let fresh = !c.stale && now.is_some() && now == c.stamp;
        if let (true, Some(h)) = (fresh, &c.header) {
            return Ok(h.clone());
        }
        let read = std::fs::read_to_string(&self.path)
            .map_err(|source| TokenError::Read {
                path: self.shown(),
                source,
            })
            .and_then(|text| bearer_header(&text, &self.shown()));
        match read {
            Ok(h) => {
                let changed = c.header.as_ref() != Some(&h);
                if changed && c.header.is_some() {
                    tracing::info!(path = %self.shown(), "token file changed; using the new token");
                }
                c.header = Some(h.clone());
                c.stamp = now;
                c.stale = false;
                Ok(h)
            }
            Err(e) => match &c.header {
                Some(h) => {
                    tracing::warn!(error = %e, "keeping the last token read");
                    Ok(h.clone())
                }
                None => Err(e),
            },
        }
    }

    /// The server refused the token (401): read the file again next time.
    pub fn refused(&self) {
        if let Ok(mut c) = self.cached.lock() {
            c.stale = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("captf-token-test-{}-{name}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir.join("token")
    }

    #[test]
    fn a_trailing_newline_is_trimmed() {
        let h = bearer_header("abc.def\n", "t").expect("usable");
        assert_eq!(h.to_str().ok(), Some("Bearer abc.def"));
        assert!(h.is_sensitive());
        assert!(bearer_header(" \n", "t").is_err());
        assert!(bearer_header("a\u{1}b", "t").is_err());
    }

    #[test]
    fn an_atomically_replaced_file_is_read_again() {
        let path = temp("rename");
        std::fs::write(&path, "old-token\n").expect("write");
        let f = TokenFile::open(path.clone()).expect("opens");
        assert_eq!(
            f.header().expect("h").to_str().ok(),
            Some("Bearer old-token")
        );
        // The kubelet's way: write aside, rename over.
        let aside = path.with_extension("new");
        std::fs::write(&aside, "new-token\n").expect("write");
        std::fs::rename(&aside, &path).expect("rename");
        assert_eq!(
            f.header().expect("h").to_str().ok(),
            Some("Bearer new-token")
        );
    }

    #[test]
    fn a_refused_token_is_read_again_and_a_vanished_file_keeps_the_last() {
        let path = temp("refused");
        std::fs::write(&path, "one").expect("write");
        let f = TokenFile::open(path.clone()).expect("opens");
        f.refused();
        assert_eq!(f.header().expect("h").to_str().ok(), Some("Bearer one"));
        std::fs::remove_file(&path).expect("rm");
        assert_eq!(f.header().expect("h").to_str().ok(), Some("Bearer one"));
        assert!(
            TokenFile::open(path).is_err(),
            "a missing file fails the start"
        );
    }
}
