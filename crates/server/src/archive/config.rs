//! The `[archive]` section: where tasks past their TTL are kept (a directory, or an
//! S3-compatible bucket), whether their journals go with them, and how often the reaper
//! looks for them.

use std::path::PathBuf;

use serde::Deserialize;
use snodo_core::config::SettingError;

/// The `[archive]` section. Exactly one of `directory` and `s3` says where.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveSettings {
    /// A directory on this machine (`directory`; a relative path is resolved against the
    /// configuration file's directory). It is made when missing.
    pub directory: Option<PathBuf>,
    /// An S3-compatible bucket (`[archive.s3]`).
    pub s3: Option<S3Settings>,
    /// Keep each task's outbound journal with it (`journal`, default false): what the
    /// task's requests were answered, bodies included, which may hold what the APIs it
    /// called consider private.
    pub journal: bool,
    /// How often the reaper looks for tasks past their TTL, in milliseconds (`interval_ms`;
    /// unset: `runner.reap_interval_ms`, default a minute). It sets the reaper's pace: the
    /// archive is kept by the reaper.
    pub interval_ms: Option<u64>,
}

/// `[archive.s3]`: a bucket of Amazon S3 or of a server that speaks its API. Credentials
/// come from the environment under AWS's own names (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or from the machine's role, never from
/// the file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Settings {
    /// The bucket (`bucket`).
    pub bucket: String,
    /// The key prefix every object is under (`prefix`, e.g. `snodo/tasks`; default none).
    pub prefix: String,
    /// The region (`region`; unset: `AWS_REGION`, else `us-east-1`).
    pub region: Option<String>,
    /// The server's URL for an S3-compatible server other than Amazon's (`endpoint`, e.g.
    /// `http://127.0.0.1:9000`); requests then name the bucket in the path.
    pub endpoint: Option<String>,
    /// Allow an `http://` endpoint (`allow_http`, default false).
    pub allow_http: bool,
}

impl ArchiveSettings {
    /// The key and the reason of a setting that cannot hold (keys relative to the section).
    pub fn check(&self) -> Result<(), SettingError> {
        match (&self.directory, &self.s3) {
            (None, None) => {
                return Err(SettingError::new(
                    "directory",
                    "say where the archive is: `directory = \"...\"` or an `[archive.s3]` bucket",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(SettingError::new(
                    "s3",
                    "an archive is a directory or a bucket, not both: remove `directory` or `[archive.s3]`",
                ));
            }
            (Some(d), None) if d.as_os_str().is_empty() => {
                return Err(SettingError::new("directory", "must not be empty"));
            }
            _ => {}
        }
        if let Some(s3) = &self.s3 {
            s3.check().map_err(|e| e.under("s3"))?;
        }
        if self.interval_ms == Some(0) {
            return Err(SettingError::new(
                "interval_ms",
                "at least 1: the reaper keeps the archive",
            ));
        }
        Ok(())
    }
}

impl S3Settings {
    fn check(&self) -> Result<(), SettingError> {
        let bucket = &self.bucket;
        if bucket.len() < 3
            || bucket.len() > 63
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            return Err(SettingError::new(
                "bucket",
                format!(
                    "{bucket:?} is not a bucket name (3 to 63 lower-case letters, digits, '-' and '.')"
                ),
            ));
        }
        if self.prefix.starts_with('/') || self.prefix.ends_with('/') || self.prefix.contains("//")
        {
            return Err(SettingError::new(
                "prefix",
                format!(
                    "{:?}: a prefix is key segments joined by '/', with none empty (e.g. \"snodo/tasks\")",
                    self.prefix
                ),
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            match endpoint.split_once("://") {
                Some(("https", rest)) if !rest.is_empty() => {}
                Some(("http", rest)) if !rest.is_empty() => {
                    if !self.allow_http {
                        return Err(SettingError::new(
                            "endpoint",
                            format!("{endpoint} is plain HTTP: set allow_http = true to use it"),
                        ));
                    }
                }
                _ => {
                    return Err(SettingError::new(
                        "endpoint",
                        format!("{endpoint:?} is not an http:// or https:// URL"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(toml_like: ArchiveSettings) -> Result<(), String> {
        toml_like
            .check()
            .map_err(|e| format!("{}: {}", e.key, e.reason))
    }

    #[test]
    fn an_archive_names_one_place_and_a_well_formed_bucket() {
        let s3 = |bucket: &str| S3Settings {
            bucket: bucket.into(),
            ..S3Settings::default()
        };
        assert!(
            settings(ArchiveSettings::default())
                .unwrap_err()
                .starts_with("directory:")
        );
        let both = ArchiveSettings {
            directory: Some("a".into()),
            s3: Some(s3("tasks")),
            ..ArchiveSettings::default()
        };
        assert!(settings(both).unwrap_err().contains("not both"));
        let bad = ArchiveSettings {
            s3: Some(s3("Tasks_1")),
            ..ArchiveSettings::default()
        };
        assert!(settings(bad).unwrap_err().starts_with("s3.bucket:"));
        let plain = ArchiveSettings {
            s3: Some(S3Settings {
                endpoint: Some("http://127.0.0.1:9000".into()),
                ..s3("tasks")
            }),
            ..ArchiveSettings::default()
        };
        assert!(settings(plain).unwrap_err().contains("allow_http"));
        let prefix = ArchiveSettings {
            s3: Some(S3Settings {
                prefix: "/snodo".into(),
                ..s3("tasks")
            }),
            ..ArchiveSettings::default()
        };
        assert!(settings(prefix).unwrap_err().starts_with("s3.prefix:"));
        let good = ArchiveSettings {
            s3: Some(S3Settings {
                prefix: "snodo/tasks".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                allow_http: true,
                ..s3("tasks")
            }),
            interval_ms: Some(1_000),
            ..ArchiveSettings::default()
        };
        assert_eq!(settings(good), Ok(()));
        let never = ArchiveSettings {
            directory: Some("a".into()),
            interval_ms: Some(0),
            ..ArchiveSettings::default()
        };
        assert!(settings(never).unwrap_err().starts_with("interval_ms:"));
    }
}
