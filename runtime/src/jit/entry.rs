//! One cache entry on disk: a header line, then the PTX.
//!
//! ```text
//! fathom-jit-ptx v1 key=<64 hex> body-sha256=<64 hex> kernel=<name>\n
//! <PTX>
//! ```
//!
//! The header names the key the file must be stored under and the hash of the body, so a file
//! that was truncated, had a byte changed, or was copied under another key's name is told from
//! a good one before its PTX reaches the driver.

use sha2::{Digest, Sha256};
use thiserror::Error;

use super::key::{hex, FORMAT_VERSION};

/// The first word of every entry.
pub const MAGIC: &str = "fathom-jit-ptx";

/// A cache entry: the PTX of one kernel under one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The cache key (the file's stem).
    pub key: String,
    /// The kernel's name.
    pub kernel: String,
    /// The PTX text.
    pub ptx: String,
}

/// Why a file is not a valid entry for the key it was looked up under.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CorruptReason {
    /// The file has no bytes.
    #[error("the file is empty")]
    Empty,
    /// No newline ends the header (a file cut inside its first line).
    #[error("the header line has no end (truncated)")]
    NoHeaderEnd,
    /// The header or the body is not UTF-8.
    #[error("the {part} is not UTF-8 text")]
    NotText {
        /// `header` or `body`.
        part: &'static str,
    },
    /// The header does not start with [`MAGIC`].
    #[error("the header does not start with `{MAGIC}`: `{found}`")]
    BadMagic {
        /// The first word found.
        found: String,
    },
    /// Another format version.
    #[error("format version `{found}`, this build reads v{FORMAT_VERSION}")]
    Version {
        /// The version word found.
        found: String,
    },
    /// The header's fields are not the five expected ones.
    #[error("malformed header: {detail}")]
    MalformedHeader {
        /// What is wrong.
        detail: String,
    },
    /// The header names another key than the file's.
    #[error("the header's key is {found}, the file is for {expected}")]
    WrongKey {
        /// The key looked up.
        expected: String,
        /// The key in the header.
        found: String,
    },
    /// The header names another kernel.
    #[error("the header's kernel is `{found}`, expected `{expected}`")]
    WrongKernel {
        /// The kernel looked up.
        expected: String,
        /// The kernel in the header.
        found: String,
    },
    /// The body's hash differs from the header's (truncated or changed body).
    #[error(
        "the PTX body's SHA-256 is {found}, the header says {expected} (truncated or changed)"
    )]
    BodyHash {
        /// The hash in the header.
        expected: String,
        /// The hash of the body read.
        found: String,
    },
}

impl CacheEntry {
    /// An entry of `ptx` for kernel `kernel` under `key`.
    pub fn new(key: impl Into<String>, kernel: impl Into<String>, ptx: impl Into<String>) -> Self {
        CacheEntry {
            key: key.into(),
            kernel: kernel.into(),
            ptx: ptx.into(),
        }
    }

    /// The file's bytes: header line, then the PTX.
    pub fn encode(&self) -> Vec<u8> {
        // Keys and kernel names are generated ([a-z0-9_]); a space or newline in one would make
        // an entry that never reads back.
        assert!(
            !self.key.is_empty() && !self.key.contains([' ', '\n']),
            "cache key `{}` must be one non-empty word",
            self.key
        );
        assert!(
            !self.kernel.is_empty() && !self.kernel.contains([' ', '\n']),
            "kernel name `{}` must be one non-empty word",
            self.kernel
        );
        let header = format!(
            "{MAGIC} v{FORMAT_VERSION} key={} body-sha256={} kernel={}\n",
            self.key,
            body_sha256(self.ptx.as_bytes()),
            self.kernel
        );
        let mut bytes = header.into_bytes();
        bytes.extend_from_slice(self.ptx.as_bytes());
        bytes
    }

    /// Reads the bytes of a file looked up under `key` for kernel `kernel`, verifying the
    /// header and the body's hash.
    pub fn decode(bytes: &[u8], key: &str, kernel: &str) -> Result<CacheEntry, CorruptReason> {
        if bytes.is_empty() {
            return Err(CorruptReason::Empty);
        }
        let end = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(CorruptReason::NoHeaderEnd)?;
        let header = std::str::from_utf8(&bytes[..end])
            .map_err(|_| CorruptReason::NotText { part: "header" })?;
        let body = &bytes[end + 1..];

        let fields: Vec<&str> = header.split(' ').collect();
        let magic = fields.first().copied().unwrap_or_default();
        if magic != MAGIC {
            return Err(CorruptReason::BadMagic {
                found: magic.to_string(),
            });
        }
        let version = fields.get(1).copied().unwrap_or_default();
        if version != format!("v{FORMAT_VERSION}") {
            return Err(CorruptReason::Version {
                found: version.to_string(),
            });
        }
        if fields.len() != 5 {
            return Err(CorruptReason::MalformedHeader {
                detail: format!("{} space-separated fields, expected 5", fields.len()),
            });
        }
        let value = |i: usize, name: &str| {
            fields[i]
                .strip_prefix(name)
                .and_then(|v| v.strip_prefix('='))
                .ok_or_else(|| CorruptReason::MalformedHeader {
                    detail: format!("field {} is `{}`, expected `{name}=...`", i + 1, fields[i]),
                })
        };
        let found_key = value(2, "key")?;
        let found_hash = value(3, "body-sha256")?;
        let found_kernel = value(4, "kernel")?;
        if found_key != key {
            return Err(CorruptReason::WrongKey {
                expected: key.to_string(),
                found: found_key.to_string(),
            });
        }
        if found_kernel != kernel {
            return Err(CorruptReason::WrongKernel {
                expected: kernel.to_string(),
                found: found_kernel.to_string(),
            });
        }
        let hash = body_sha256(body);
        if hash != found_hash {
            return Err(CorruptReason::BodyHash {
                expected: found_hash.to_string(),
                found: hash,
            });
        }
        let ptx = std::str::from_utf8(body).map_err(|_| CorruptReason::NotText { part: "body" })?;
        Ok(CacheEntry::new(key, kernel, ptx))
    }
}

fn body_sha256(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}
