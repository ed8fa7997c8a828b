//! `SNODO_<SECTION>__<KEY>` environment variables laid over the file's TOML tree.
//!
//! A variable names a key by its path: the sections and the key upper-cased, joined with
//! `__` (`SNODO_HTTP__MAX_CONNECTIONS` is `max_connections` of `[http]`). The overlay
//! works on the untyped tree before the typed deserialization, so every key of every
//! section can be set without a list of them here. A value is read as a TOML value
//! (numbers, booleans, arrays, inline tables) and, when the key turns out to want a string,
//! as the text itself.

use serde::de::{self, Deserializer, Visitor};

use super::ConfigError;

/// What every configuration variable starts with.
pub(super) const PREFIX: &str = "SNODO_";

/// The `file` of an error about a variable.
pub(super) const SOURCE: &str = "the environment";

/// One variable laid over the tree.
#[derive(Debug, Clone)]
pub(super) struct Setting {
    /// The variable's name.
    pub(super) var: String,
    /// The key path it set.
    pub(super) path: Vec<String>,
    /// The dotted paths of the tables it created on its way, and of the key.
    pub(super) created: Vec<String>,
    /// Its text.
    raw: String,
    /// Whether the tree holds the text read as a TOML value (rather than as a string).
    typed: bool,
    /// What the key said of the typed value, when it wanted something else.
    pub(super) typed_error: Option<String>,
}

impl Setting {
    /// The dotted key it set.
    pub(super) fn key(&self) -> String {
        self.path.join(".")
    }

    /// Whether an error at `at` (serde's path of the failing value) is about this
    /// variable: it names a table the variable created, the key, or a value inside it.
    pub(super) fn covers(&self, at: &str) -> bool {
        let key = self.key();
        self.created.iter().any(|c| c == at)
            || at
                .strip_prefix(key.as_str())
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    }

    /// Puts the variable's text into `tree` as a string, in place of its typed reading.
    /// False when it already was a string.
    pub(super) fn retry_as_text(&mut self, tree: &mut toml::Table, error: String) -> bool {
        if !self.typed {
            return false;
        }
        self.typed = false;
        self.typed_error = Some(error);
        if let Some((last, parents)) = self.path.split_last() {
            let mut table = tree;
            for p in parents {
                match table.get_mut(p) {
                    Some(toml::Value::Table(t)) => table = t,
                    _ => return true,
                }
            }
            table.insert(last.clone(), toml::Value::String(self.raw.clone()));
        }
        true
    }
}

/// The configuration variables among `vars`, laid over `tree`: every name under
/// [`PREFIX`] holding `__`, and every one naming a key of the top level (`SNODO_LISTEN`).
/// Other names under the prefix (`SNODO_URL`, `SNODO_ADMIN_TOKEN`) belong to the commands
/// that read them and are left alone.
pub(super) fn overlay(
    tree: &mut toml::Table,
    vars: impl IntoIterator<Item = (String, String)>,
    top_level: &[&str],
) -> Result<Vec<Setting>, ConfigError> {
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| {
            name.strip_prefix(PREFIX).is_some_and(|rest| {
                rest.contains("__") || top_level.contains(&rest.to_ascii_lowercase().as_str())
            })
        })
        .collect();
    // Sorted, so that a deeper variable always meets the tables of a shallower one.
    vars.sort();
    let mut out = Vec::new();
    for (var, raw) in vars {
        let rest = &var[PREFIX.len()..];
        let segments: Vec<&str> = rest.split("__").collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(error(
                &var,
                "an empty section or key: sections and keys are joined with one `__`".into(),
            ));
        }
        out.push(set(tree, &var, &segments, raw)?);
    }
    Ok(out)
}

/// Lays one variable over `tree`.
fn set(
    tree: &mut toml::Table,
    var: &str,
    segments: &[&str],
    raw: String,
) -> Result<Setting, ConfigError> {
    let mut path = Vec::new();
    let mut created = Vec::new();
    let mut table = tree;
    let (last, parents) = segments
        .split_last()
        .expect("split yields one segment at least");
    for segment in parents {
        let name = name_in(table, segment);
        path.push(name.clone());
        if !table.contains_key(&name) {
            created.push(path.join("."));
            table.insert(name.clone(), toml::Value::Table(toml::Table::new()));
        }
        table = match table.get_mut(&name) {
            Some(toml::Value::Table(t)) => t,
            Some(toml::Value::Array(_)) => {
                return Err(error(
                    var,
                    format!(
                        "{} is a list of tables; keys inside one cannot be set from the environment",
                        path.join(".")
                    ),
                ));
            }
            _ => return Err(error(var, format!("{} is not a section", path.join(".")))),
        };
    }
    let name = name_in(table, last);
    path.push(name.clone());
    created.push(path.join("."));
    let typed = typed(&raw);
    table.insert(
        name,
        typed
            .clone()
            .unwrap_or_else(|| toml::Value::String(raw.clone())),
    );
    Ok(Setting {
        var: var.to_owned(),
        path,
        created,
        raw,
        typed: typed.is_some(),
        typed_error: None,
    })
}

/// The key of `table` a variable's segment names: a key already there that reads the same
/// upper-cased with `-` as `_` (a tool named `my-tool`), or the segment lower-cased.
fn name_in(table: &toml::Table, segment: &str) -> String {
    table
        .keys()
        .find(|k| k.to_ascii_uppercase().replace('-', "_") == segment)
        .cloned()
        .unwrap_or_else(|| segment.to_ascii_lowercase())
}

/// `raw` read as a TOML value, unless it is a string (a string key takes the text as is,
/// quotes included) or not a value at all.
fn typed(raw: &str) -> Option<toml::Value> {
    let table: toml::Table = format!("v = {raw}").parse().ok()?;
    if table.len() != 1 {
        return None;
    }
    match table.get("v")? {
        toml::Value::String(_) => None,
        v => Some(v.clone()),
    }
}

/// The error naming `var`.
pub(super) fn error(var: &str, reason: String) -> ConfigError {
    ConfigError {
        file: SOURCE.into(),
        key: var.into(),
        reason,
    }
}

/// The variable that would name `key` (a dotted path).
pub(super) fn var_of(key: &str) -> String {
    format!(
        "{PREFIX}{}",
        key.split('.')
            .map(|s| s.to_ascii_uppercase().replace('-', "_"))
            .collect::<Vec<_>>()
            .join("__")
    )
}

/// The field names of the struct `T` deserializes as (the keys of the file's top level).
pub(super) fn fields_of<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that only records the fields a struct asks for.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn variables_become_keys_and_values_are_read_as_toml_first() {
        let mut tree: toml::Table = "[tools.my-tool]\nttl_ms = 1\n".parse().unwrap();
        let set = overlay(
            &mut tree,
            vars(&[
                ("SNODO_HTTP__MAX_CONNECTIONS", "8"),
                ("SNODO_TOOLS__MY_TOOL__JOURNAL", "false"),
                ("SNODO_ADMIN__CROSS_TENANT", "[\"ops\"]"),
                ("SNODO_NODE__ID", "\"quoted\""),
                ("SNODO_LISTEN", "127.0.0.1:9"),
                ("SNODO_URL", "http://elsewhere"),
                ("OTHER__KEY", "1"),
            ]),
            &["listen"],
        )
        .unwrap();
        assert_eq!(set.len(), 5);
        assert_eq!(tree["http"]["max_connections"].as_integer(), Some(8));
        assert_eq!(tree["tools"]["my-tool"]["journal"].as_bool(), Some(false));
        assert_eq!(tree["tools"]["my-tool"]["ttl_ms"].as_integer(), Some(1));
        assert_eq!(tree["admin"]["cross_tenant"][0].as_str(), Some("ops"));
        assert_eq!(tree["node"]["id"].as_str(), Some("\"quoted\""));
        assert_eq!(tree["listen"].as_str(), Some("127.0.0.1:9"));
        assert!(!tree.contains_key("url"));
    }

    #[test]
    fn a_variable_cannot_reach_into_a_value_or_a_list_of_tables() {
        let mut tree: toml::Table = "listen = \"x\"\n[[components]]\npath = \"a\"\n"
            .parse()
            .unwrap();
        let e = overlay(&mut tree, vars(&[("SNODO_LISTEN__PORT", "1")]), &[]).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            (SOURCE, "SNODO_LISTEN__PORT")
        );
        let e = overlay(&mut tree, vars(&[("SNODO_COMPONENTS__PATH", "b")]), &[]).unwrap_err();
        assert!(e.reason.contains("list of tables"), "{e}");
        let e = overlay(&mut tree, vars(&[("SNODO_HTTP____X", "b")]), &[]).unwrap_err();
        assert!(e.reason.contains("empty"), "{e}");
    }

    #[test]
    fn names_are_spelled_back_and_fields_are_found() {
        assert_eq!(
            var_of("http.max_connections"),
            "SNODO_HTTP__MAX_CONNECTIONS"
        );
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Two {
            a: u8,
            b_c: u8,
        }
        assert_eq!(fields_of::<Two>(), ["a", "b_c"]);
    }
}
