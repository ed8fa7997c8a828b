//! The nearest valid name to a mistyped one, for errors that say "did you mean …?".

/// The candidate closest to `wanted` by edit distance (case-insensitive), if it is close
/// enough to be a typo: at most a third of the longer name's length, and at least one edit
/// away from every other candidate as close.
pub fn nearest<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted_lower = wanted.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let d = distance(&wanted_lower, &candidate.to_lowercase());
        let allowed = (wanted.len().max(candidate.len()) / 3).max(1);
        if d > allowed {
            continue;
        }
        if best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `text` followed by `; did you mean "…"?` when a candidate is near `wanted`.
pub fn with_suggestion<'a>(
    text: String,
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    match nearest(wanted, candidates) {
        Some(near) => format!("{text}; did you mean {near:?}?"),
        None => text,
    }
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_name_and_a_stranger_finds_none() {
        let keys = ["max_connections", "header_timeout_ms", "idle_timeout_ms"];
        assert_eq!(nearest("max_conections", keys), Some("max_connections"));
        assert_eq!(nearest("idle_timout_ms", keys), Some("idle_timeout_ms"));
        assert_eq!(
            nearest("Header_Timeout_MS", keys),
            Some("header_timeout_ms")
        );
        assert_eq!(nearest("colour", keys), None);
        assert_eq!(nearest("x", ["y"]), Some("y"), "one edit is always close");
        assert_eq!(nearest("greet", Vec::<&str>::new()), None);
        assert_eq!(
            with_suggestion("no tool \"gret\"".into(), "gret", ["greet", "fetch"]),
            "no tool \"gret\"; did you mean \"greet\"?"
        );
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
