//! The layer map of every crate, written down in ARCHITECTURE.md ("Layers"), checked against
//! the code: each `crate::<module>` path (in `use` lines, grouped `use crate::{a, b}`, and
//! inline paths) must name a module listed below the one whose file holds it, no two modules
//! may refer to each other, and every top-level module must be on the map.
//!
//! What the check reads, and what it leaves out:
//! - a file belongs to the top-level module it sits in (`src/mcp/tools_call.rs` is `mcp`);
//!   the crate roots (`lib.rs`, `main.rs`) declare modules and are not one;
//! - `crate::Name` where the root re-exports `Name` from a module (`pub use m::Name`) is a
//!   reference to that module; items the root defines itself belong to no module;
//! - comments and test code (`tests.rs` files, and a `#[cfg(test)] mod tests` to the end
//!   of its file) are not read: tests sit above every module of their crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate of the map: its modules lowest first, and the upward references it allows.
#[derive(Debug)]
struct CrateMap {
    /// The package name, for messages.
    name: String,
    /// The crate's directory, from the workspace root.
    dir: PathBuf,
    /// Module names, lowest first.
    modules: Vec<String>,
    /// `allow a -> b`: a reference against the layers that is known and written down.
    allowed: BTreeSet<(String, String)>,
}

/// A module's reference to another, and the first place it is made.
type Edges = BTreeMap<(String, String), String>;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate sits in the workspace")
        .to_path_buf()
}

/// The fenced block under `## Layers` in ARCHITECTURE.md, parsed.
fn layer_map(architecture: &str) -> Vec<CrateMap> {
    let section = architecture
        .split("\n## Layers")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Layers\" section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the Layers section holds a ```text block");
    let mut crates: Vec<CrateMap> = Vec::new();
    for line in block.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            let mut words = line.split_whitespace();
            let (Some(name), Some(dir)) = (words.next(), words.next()) else {
                panic!("a crate line of the layer map is `<package> <directory>`: {line:?}");
            };
            crates.push(CrateMap {
                name: name.to_owned(),
                dir: PathBuf::from(dir),
                modules: Vec::new(),
                allowed: BTreeSet::new(),
            });
            continue;
        }
        let current = crates
            .last_mut()
            .expect("the layer map starts with a crate line");
        let line = line.trim();
        if let Some(rule) = line.strip_prefix("allow ") {
            let words: Vec<&str> = rule.split_whitespace().collect();
            let [from, "->", to, ..] = words[..] else {
                panic!("an allowance of the layer map is `allow a -> b (why)`: {line:?}");
            };
            current.allowed.insert((from.to_owned(), to.to_owned()));
            continue;
        }
        let module = line.split_whitespace().next().expect("a module line");
        assert!(
            line.len() > module.len(),
            "{}: module {module} says what it never does",
            current.name
        );
        current.modules.push(module.to_owned());
    }
    crates
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `text` with its comments left out and the insides of its string literals blanked, line
/// breaks kept (so offsets still give line numbers).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, skipped: &str| {
        out.extend(skipped.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut rest = text;
    let mut prev = ' ';
    while let Some(c) = rest.chars().next() {
        let raw = raw_string_len(rest, prev);
        let step = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            rest.find("*/").map_or(rest.len(), |end| end + 2)
        } else if raw > 0 {
            raw
        } else if rest.starts_with("'\"'") {
            3
        } else if rest.starts_with("'\\\"'") {
            4
        } else if c == '"' {
            string_len(rest)
        } else {
            out.push(c);
            prev = c;
            rest = &rest[c.len_utf8()..];
            continue;
        };
        blank(&mut out, &rest[..step]);
        prev = ' ';
        rest = &rest[step..];
    }
    out
}

/// The length of the string literal `rest` starts with (at its opening quote).
fn string_len(rest: &str) -> usize {
    let mut escaped = false;
    for (i, c) in rest.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i + 1,
            _ => {}
        }
    }
    rest.len()
}

/// The length of the raw string literal (`r"…"`, `r#"…"#`, `br"…"`) `rest` starts with, or
/// 0; `prev` is the character before it (a raw string does not continue an identifier).
fn raw_string_len(rest: &str, prev: char) -> usize {
    let body = match rest.strip_prefix("br").or_else(|| rest.strip_prefix('r')) {
        Some(body) if !is_ident(prev) => body,
        _ => return 0,
    };
    let hashes = body.len() - body.trim_start_matches('#').len();
    if !body[hashes..].starts_with('"') {
        return 0;
    }
    let close = format!("\"{}", "#".repeat(hashes));
    let opened = rest.len() - body.len() + hashes + 1;
    rest[opened..]
        .find(&close)
        .map_or(rest.len(), |end| opened + end + close.len())
}

/// The code of a file that is not its unit tests: up to a `#[cfg(test)]` followed by an
/// inline `mod tests {` (`pub(super) mod tests {` when a sibling's tests share its
/// helpers), which by the workspace's convention closes the file (a `mod tests;`
/// declaration is not a cut: its `tests.rs` is left out whole).
fn without_tests(text: &str) -> &str {
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let item = next.trim_start();
                let item = ["pub(super) ", "pub(crate) "]
                    .iter()
                    .find_map(|v| item.strip_prefix(v))
                    .unwrap_or(item);
                item.starts_with("mod tests") && next.trim_end().ends_with('{')
            })
        {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names a file's `crate::` paths start with, each with its byte offset: `crate::a::b`
/// names `a`, `crate::{a, b::c}` names `a` and `b`. Macros (`crate::m!`) are skipped.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            let mut name = String::new();
            for c in group.chars() {
                if item_start && is_ident(c) {
                    name.push(c);
                    continue;
                }
                if !name.is_empty() {
                    out.push((std::mem::take(&mut name), at));
                    item_start = false;
                }
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    _ => {}
                }
            }
            if !name.is_empty() {
                out.push((name, at));
            }
            continue;
        }
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        let is_macro = rest[name.len()..].starts_with('!');
        if !name.is_empty() && !is_macro {
            out.push((name, at));
        }
    }
    out
}

/// The top-level modules the crate roots declare, and the names they re-export from them.
fn roots(src: &Path) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut modules = BTreeSet::new();
    let mut texts = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        let Ok(text) = std::fs::read_to_string(src.join(root)) else {
            continue;
        };
        let text = without_comments(&text);
        for line in text.lines() {
            let line = line.trim();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            if let Some(name) = line.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                modules.insert(name.trim().to_owned());
            }
        }
        texts.push(text);
    }
    let mut reexported = BTreeMap::new();
    for text in &texts {
        for statement in text.split(';') {
            let Some(path) = statement
                .split("pub use ")
                .nth(1)
                .or_else(|| statement.split("pub(crate) use ").nth(1))
            else {
                continue;
            };
            let Some((module, items)) = path.split_once("::") else {
                continue;
            };
            if !modules.contains(module) {
                continue;
            }
            let items = items.trim().trim_start_matches('{').trim_end_matches('}');
            for item in items.split(',') {
                let name = item.split_whitespace().last().unwrap_or("");
                if !name.is_empty() {
                    reexported.insert(name.to_owned(), module.to_owned());
                }
            }
        }
    }
    (modules, reexported)
}

/// The top-level modules of the crate at `dir` (from the workspace `root`), and the
/// references between them.
fn references(root: &Path, dir: &Path) -> (BTreeSet<String>, Edges) {
    let src = root.join(dir).join("src");
    let (modules, reexported) = roots(&src);
    let mut edges = Edges::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).expect("under src");
        let parts: Vec<&str> = relative
            .iter()
            .map(|p| p.to_str().expect("utf-8"))
            .collect();
        if parts.len() == 1 && (parts[0] == "lib.rs" || parts[0] == "main.rs") {
            continue;
        }
        if parts.last() == Some(&"tests.rs") || parts[..parts.len() - 1].contains(&"tests") {
            continue;
        }
        let own = parts[0].trim_end_matches(".rs");
        let text = std::fs::read_to_string(&file).expect("a source file");
        let code = without_comments(&text);
        let code = without_tests(&code);
        for (name, at) in crate_paths(code) {
            let target = reexported.get(&name).unwrap_or(&name);
            if target == own || !modules.contains(target) {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            edges
                .entry((own.to_owned(), target.clone()))
                .or_insert_with(|| format!("{}/src/{}:{line}", dir.display(), relative.display()));
        }
    }
    (modules, edges)
}

/// What is wrong with `edges` against `map`, one line each.
fn problems(map: &CrateMap, modules: &BTreeSet<String>, edges: &Edges) -> Vec<String> {
    let name = &map.name;
    let mut out = Vec::new();
    for m in modules {
        if !map.modules.contains(m) {
            out.push(format!(
                "{name}: module {m} is not on the layer map (ARCHITECTURE.md, Layers)"
            ));
        }
    }
    for m in &map.modules {
        if !modules.contains(m) {
            out.push(format!(
                "{name}: the layer map lists {m}, which the crate does not declare"
            ));
        }
    }
    let layer = |m: &str| map.modules.iter().position(|x| x == m);
    for ((from, to), at) in edges {
        if map.allowed.contains(&(from.clone(), to.clone())) {
            continue;
        }
        if let Some(back) = edges.get(&(to.clone(), from.clone())) {
            let allowed_back = map.allowed.contains(&(to.clone(), from.clone()));
            if from < to && !allowed_back {
                out.push(format!(
                    "{name}: a cycle between {from} and {to}: {from} -> {to} at {at}, {to} -> {from} at {back}"
                ));
            }
            if !allowed_back {
                continue;
            }
        }
        if let (Some(a), Some(b)) = (layer(from), layer(to))
            && b >= a
        {
            out.push(format!(
                "{name}: {from} refers to {to}, which the layer map puts above it, at {at}"
            ));
        }
    }
    for (from, to) in &map.allowed {
        if !edges.contains_key(&(from.clone(), to.clone())) {
            out.push(format!(
                "{name}: the layer map allows {from} -> {to}, which no longer happens: remove the allowance"
            ));
        }
    }
    out
}

/// Every crate of the workspace keeps to its layer map.
#[test]
fn every_crate_keeps_to_its_layer_map() {
    let root = workspace_root();
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let maps = layer_map(&architecture);
    let mapped: BTreeSet<&str> = maps.iter().map(|m| m.name.as_str()).collect();
    for package in [
        "snodo-core",
        "snodo-wasm",
        "snodo-runner",
        "snodo-server",
        "snodo-otel",
        "snodo",
    ] {
        assert!(mapped.contains(package), "{package} has no layer map");
    }
    let mut found = Vec::new();
    for map in &maps {
        let (modules, edges) = references(&root, &map.dir);
        found.extend(problems(map, &modules, &edges));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The reader of the check finds every form a reference takes, and nothing in comments,
/// strings or unit tests.
#[test]
fn references_are_found_in_every_form() {
    let code = without_comments(
        "use crate::a::X;\nuse crate::{b, c::{D, E}, \n  f};\nfn g() { crate::h::i(); }\n\
         // crate::j\nlet s = (\"crate::k\", r#\"\"crate::p\"#, '\"');\n\
         /* crate::l */ crate::m!(x); my_crate::n;\n\
         #[cfg(test)]\nmod tests;\nuse crate::q;\n\
         #[cfg(test)]\nmod tests {\n    use crate::o;\n}\n",
    );
    let names: Vec<String> = crate_paths(without_tests(&code))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["a", "b", "c", "f", "h", "q"]);
    let shared = "use crate::a;\n#[cfg(test)]\npub(super) mod tests {\n    use crate::b;\n}\n";
    let names: Vec<String> = crate_paths(without_tests(shared))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["a"], "tests a sibling's tests share are tests too");
}

/// A cycle is reported with both modules and a place for each direction; a reference up
/// the map with its place; a module missing from the map, and an allowance no longer
/// needed, by name.
#[test]
fn a_cycle_an_upward_reference_and_a_missing_module_are_reported() {
    let map = CrateMap {
        name: "demo".into(),
        dir: PathBuf::new(),
        modules: vec!["low".into(), "mid".into(), "high".into()],
        allowed: [("low".to_owned(), "gone".to_owned())].into(),
    };
    let modules: BTreeSet<String> = ["low", "mid", "high", "new"].map(String::from).into();
    let edges: Edges = [
        (("high", "mid"), "src/high.rs:3"),
        (("mid", "high"), "src/mid.rs:7"),
        (("low", "mid"), "src/low.rs:1"),
    ]
    .into_iter()
    .map(|((a, b), at)| ((a.to_owned(), b.to_owned()), at.to_owned()))
    .collect();
    let found = problems(&map, &modules, &edges);
    assert_eq!(
        found,
        [
            "demo: module new is not on the layer map (ARCHITECTURE.md, Layers)",
            "demo: a cycle between high and mid: high -> mid at src/high.rs:3, mid -> high at src/mid.rs:7",
            "demo: low refers to mid, which the layer map puts above it, at src/low.rs:1",
            "demo: the layer map allows low -> gone, which no longer happens: remove the allowance",
        ]
    );
}
