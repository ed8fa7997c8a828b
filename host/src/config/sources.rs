//! Where a [`Config`] comes from: the file, the environment laid over it, and the flags the
//! command line sets, each remembered so that an error names what the operator wrote (the
//! file and its line, the variable, or the flag).

use std::path::Path;

use super::{COMMAND_LINE, Config, ConfigError, config_error, env};

/// A key given by a variable or a flag, for errors naming what the operator wrote.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    /// The dotted key (`http.max_connections`, `auth.tokens[1]`).
    key: String,
    /// [`env::SOURCE`] or [`COMMAND_LINE`].
    source: &'static str,
    /// The variable's or the flag's name.
    name: String,
}

impl Config {
    /// Reads and parses `path`, with this process's `SNODO_<SECTION>__<KEY>` variables
    /// laid over it.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "-".into(),
            reason: format!("cannot read: {e}"),
        })?;
        let mut config = Self::parse_with_env(&file, &text, environment())?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        config.base_dir = Some(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()));
        Ok(config)
    }

    /// Parses `text` (named `file` in errors), the file alone.
    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        let de = toml::Deserializer::parse(text).map_err(|e| toml_error(file, text, "-", &e))?;
        // The path of the value that failed, as the serde stack saw it.
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let e = e.into_inner();
            // An unknown key's path ends with the key itself.
            let key = if path == "." { "-" } else { path.as_str() };
            toml_error(file, text, key, &e)
        })
    }

    /// Parses `text` (named `file` in errors) with the `SNODO_<SECTION>__<KEY>` variables
    /// among `vars` laid over it. An error about a value a variable gave names the
    /// variable.
    pub fn parse_with_env(
        file: &str,
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut tree: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| toml_error(file, text, "-", &e))?;
        let mut settings = env::overlay(&mut tree, vars, env::fields_of::<Config>())?;
        if settings.is_empty() {
            return Self::parse(file, text);
        }
        loop {
            let value = toml::Value::Table(tree.clone());
            let e = match serde_path_to_error::deserialize::<_, Config>(value) {
                Ok(mut config) => {
                    config.origins = settings
                        .iter()
                        .map(|s| Origin {
                            key: s.key(),
                            source: env::SOURCE,
                            name: s.var.clone(),
                        })
                        .collect();
                    return Ok(config);
                }
                Err(e) => e,
            };
            let at = e.path().to_string();
            let message = e.into_inner().message().to_owned();
            let Some(s) = settings.iter_mut().find(|s| s.covers(&at)) else {
                // The file's own mistake: named with its line when the file alone shows it.
                Self::parse(file, text)?;
                let key = if at == "." { "-" } else { at.as_str() };
                return Err(config_error(file, key, suggest_known(&message)));
            };
            // A key that wants a string takes the variable's text as is.
            if s.retry_as_text(&mut tree, message.clone()) {
                continue;
            }
            let reason = s.typed_error.clone().unwrap_or(message);
            let reason = match nearest_known(&reason) {
                Some((_, near)) => {
                    let parent = at.rsplit_once('.').map_or("", |(p, _)| p);
                    let key = if parent.is_empty() {
                        near.to_owned()
                    } else {
                        format!("{parent}.{near}")
                    };
                    format!("{reason}; did you mean {}?", env::var_of(&key))
                }
                None => reason,
            };
            return Err(env::error(&s.var, reason));
        }
    }

    /// The configuration without a file: the defaults and this process's environment.
    pub fn from_environment() -> Result<Self, ConfigError> {
        Self::parse_with_env(env::SOURCE, "", environment())
    }

    /// Records that `key` (dotted) was given by the command-line flag `flag`, so that an
    /// error about it names the flag.
    pub fn given_by_flag(&mut self, key: &str, flag: &str) {
        self.origins.push(Origin {
            key: key.to_owned(),
            source: COMMAND_LINE,
            name: flag.to_owned(),
        });
    }

    /// `e` naming the variable or the flag that gave its key, if one did.
    pub(super) fn attributed(&self, e: ConfigError) -> ConfigError {
        let covers = |k: &str| {
            e.key == k
                || e.key
                    .strip_prefix(k)
                    .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
        };
        // The last given wins, as it does for the value.
        match self.origins.iter().rev().find(|o| covers(&o.key)) {
            Some(o) => ConfigError {
                file: o.source.into(),
                key: o.name.clone(),
                reason: e.reason,
            },
            None => e,
        }
    }
}

/// The unknown name and the nearest expected one of serde's "unknown field `x`, expected
/// one of `a`, `b`" (or "expected `a`"), when `x` looks like a typo of one.
fn nearest_known(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, expected) = rest.split_once('`')?;
    let names = expected.split('`').skip(1).step_by(2);
    Some((unknown, crate::suggest::nearest(unknown, names)?))
}

/// serde's unknown-field message with the nearest expected name suggested.
fn suggest_known(message: &str) -> String {
    match nearest_known(message) {
        Some((_, near)) => format!("{message}; did you mean {near:?}?"),
        None => message.to_owned(),
    }
}

/// This process's environment variables (those whose name and value are text).
fn environment() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// A TOML or serde error at `key` of `file`, with its line in `text` when it has one.
fn toml_error(file: &str, text: &str, key: &str, e: &toml::de::Error) -> ConfigError {
    let at = e
        .span()
        .map(|s| {
            let line = text[..s.start.min(text.len())].lines().count().max(1);
            format!(" (line {line})")
        })
        .unwrap_or_default();
    config_error(file, key, format!("{}{at}", suggest_known(e.message())))
}
