//! The crate's structure and vocabulary, checked: every file of `src/` sits on a layer, its
//! code reaches only files on its own layer or below (test modules may reach down and
//! sideways, for fixtures such as `MemoryQueue`), no files reach each other in a loop, tests
//! included, and no word the glossary retires is back.
//!
//! A reach is any `crate::` path in the code (a `use` or an inline path), resolved to the
//! file that defines the module; comments and string literals are ignored. Code reaches other
//! files through `crate::module::...`, never through the root's re-exports (`crate::Name`
//! counts as reaching `lib.rs`, which reaches everything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, from the ground up: read from the table in `CONTRIBUTING.md`, "Layers" (the
/// one place they are written down), whose rows go from the top down. A row names its files
/// and folders as paths under `src/` in backquotes (a folder's end in `/`).
fn layers() -> Vec<(String, Vec<String>)> {
    let section = contributing_section("Layers");
    let mut layers: Vec<(String, Vec<String>)> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| layer |"))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let files = cells[2]
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|f| f.ends_with(".rs") || f.ends_with('/'))
                .map(str::to_owned)
                .collect();
            (cells[1].to_owned(), files)
        })
        .collect();
    assert!(
        layers.len() >= 5,
        "the layer table has {} rows",
        layers.len()
    );
    layers.reverse();
    layers
}

/// Lines of code: neither blank nor a comment.
fn lines_of_code(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// Every file of `src/` (its unit tests' files too) reads at once: at most 600 lines of
/// code, 1,000 in all.
#[test]
fn no_file_of_src_is_over_600_lines_of_code_or_1000_in_all() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    for f in rust_files(&src) {
        let text = std::fs::read_to_string(src.join(&f)).unwrap();
        let (code, all) = (lines_of_code(&text), text.lines().count());
        if code > 600 || all > 1_000 {
            long.push(format!("src/{f}: {code} lines of code, {all} in all"));
        }
    }
    assert!(long.is_empty(), "files too long to read at once: {long:#?}");
    assert_eq!(
        lines_of_code("fn a() {}\n\n    // why\n//! what\n    let x = 1;\n"),
        2
    );
}

/// The layer `file` sits on: the one that names it, or else its folder (a folder's files sit
/// on its layer).
fn layer_of(layers: &[(String, Vec<String>)], file: &str) -> Option<usize> {
    let named = |entry: &str| entry == file || (entry.ends_with('/') && file.starts_with(entry));
    layers
        .iter()
        .position(|(_, entries)| entries.iter().any(|e| e == file))
        .or_else(|| {
            layers
                .iter()
                .position(|(_, entries)| entries.iter().any(|e| named(e)))
        })
}

#[test]
fn a_file_sits_on_its_own_row_or_else_on_its_folders() {
    let layers = vec![
        (
            "low".to_owned(),
            vec!["a/b.rs".to_owned(), "c.rs".to_owned()],
        ),
        ("high".to_owned(), vec!["a/".to_owned()]),
    ];
    assert_eq!(layer_of(&layers, "a/b.rs"), Some(0));
    assert_eq!(layer_of(&layers, "a/mod.rs"), Some(1));
    assert_eq!(layer_of(&layers, "c.rs"), Some(0));
    assert_eq!(layer_of(&layers, "ab/mod.rs"), None);
    assert_eq!(layer_of(&layers, "d.rs"), None);
}

/// One file's reaches into other files: (target, from a test module).
type Reaches = BTreeMap<String, BTreeSet<(String, bool)>>;

#[test]
fn every_file_sits_on_a_layer_and_reaches_only_down_with_no_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let layers = layers();
    let layer_of: BTreeMap<&str, usize> = files
        .iter()
        .filter_map(|f| Some((f.as_str(), layer_of(&layers, f)?)))
        .collect();
    for f in files.iter().filter(|f| !is_test_file(f)) {
        assert!(
            layer_of.contains_key(f.as_str()),
            "src/{f} is on no layer: add it or its folder to the table in CONTRIBUTING.md, \
             \"Layers\""
        );
    }
    let sources: BTreeMap<String, String> = files
        .iter()
        .map(|f| (f.clone(), std::fs::read_to_string(src.join(f)).unwrap()))
        .collect();
    let reaches = reaches(&sources);

    let mut upward = Vec::new();
    for (from, targets) in &reaches {
        for (to, in_test) in targets {
            if !in_test && layer_of[to.as_str()] > layer_of[from.as_str()] {
                upward.push(format!(
                    "{from} ({}) -> {to} ({})",
                    layers[layer_of[from.as_str()]].0,
                    layers[layer_of[to.as_str()]].0
                ));
            }
        }
    }
    assert!(upward.is_empty(), "reaches up a layer: {upward:#?}");

    let loops = loops(&reaches);
    assert!(
        loops.is_empty(),
        "files reaching each other in a loop: {loops:#?}"
    );

    let edges: usize = reaches.values().map(BTreeSet::len).sum();
    println!("{} files, {edges} reaches, no loop", files.len());
}

#[test]
fn the_checker_finds_a_loop_and_an_upward_reach() {
    let sources: BTreeMap<String, String> = [
        (
            "a.rs",
            "use crate::b::X; // crate::c is only mentioned here\n",
        ),
        ("b.rs", "fn f() { let s = \"crate::c\"; crate::a::g(); }\n"),
        (
            "c.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::{a::Y, b::{Z, W}};\n}\n",
        ),
        ("c/tests.rs", "use crate::a::Y;\n"),
        ("c/tests/more.rs", "use crate::b::Z;\n"),
    ]
    .into_iter()
    .map(|(f, s)| (f.to_owned(), s.to_owned()))
    .collect();
    let reaches = reaches(&sources);
    let set = |pairs: &[(&str, bool)]| -> BTreeSet<(String, bool)> {
        pairs.iter().map(|(f, t)| (f.to_string(), *t)).collect()
    };
    assert_eq!(reaches["a.rs"], set(&[("b.rs", false)]));
    assert_eq!(reaches["b.rs"], set(&[("a.rs", false)]));
    assert_eq!(reaches["c.rs"], set(&[("a.rs", true), ("b.rs", true)]));
    assert_eq!(reaches["c/tests.rs"], set(&[("a.rs", true)]));
    assert_eq!(reaches["c/tests/more.rs"], set(&[("b.rs", true)]));
    assert_eq!(
        loops(&reaches),
        vec![vec!["a.rs".to_owned(), "b.rs".to_owned()]]
    );
}

/// The text of `CONTRIBUTING.md`'s section "## `heading`", up to the next section.
fn contributing_section(heading: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/CONTRIBUTING.md")).unwrap();
    let section = text
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("CONTRIBUTING.md has no section \"## {heading}\""));
    section.split("\n## ").next().unwrap_or(section).to_owned()
}

/// The words the glossary retires: the backquoted words of the last column of the table in
/// `CONTRIBUTING.md`, "Glossary".
fn retired_words() -> Vec<String> {
    contributing_section("Glossary")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| word |"))
        .flat_map(|row| {
            let retired = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
            retired
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Where each of `words` occurs in `files` (path, text): `path:line: word`.
fn occurrences(words: &[String], files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            for word in words.iter().filter(|w| line.contains(w.as_str())) {
                found.push(format!("{path}:{}: {word}", n + 1));
            }
        }
    }
    found
}

#[test]
fn no_word_the_glossary_retires_is_left_in_the_code_or_the_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let words = retired_words();
    assert!(words.len() >= 10, "only {} retired words read", words.len());
    let mut files: Vec<(String, String)> = Vec::new();
    for dir in ["src", "examples", "tests", "benches"] {
        for f in rust_files(&root.join(dir)) {
            // This file holds the retired words as the checker's own test data.
            if dir == "tests" && f == "project/layers.rs" {
                continue;
            }
            let text = std::fs::read_to_string(root.join(dir).join(&f)).unwrap();
            files.push((format!("{dir}/{f}"), text));
        }
    }
    let mut pages = vec![root.join("README.md"), root.join("Cargo.toml")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        files.push((page.display().to_string(), text));
    }
    let found = occurrences(&words, &files);
    assert!(found.is_empty(), "retired words still in use: {found:#?}");
}

#[test]
fn the_retired_word_check_finds_a_word_and_its_line() {
    let words = vec![
        "heartbeat".to_owned(),
        "crate::settle_calls::request_batch::".to_owned(),
    ];
    let files = vec![
        (
            "a.rs".to_owned(),
            "fn keep() {}\n// the heartbeat\n".to_owned(),
        ),
        (
            "b.rs".to_owned(),
            "use crate::handler::batch::Batch;\n".to_owned(),
        ),
    ];
    assert_eq!(occurrences(&words, &files), vec!["a.rs:2: heartbeat"]);
}

/// The `.rs` files under `dir`, relative to it, `/`-separated.
fn rust_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// Every file's reaches into other files of `sources`.
fn reaches(sources: &BTreeMap<String, String>) -> Reaches {
    let mut out = Reaches::new();
    for (file, text) in sources {
        let code = strip(text);
        let tests = test_spans(&code);
        let targets = out.entry(file.clone()).or_default();
        let mut at = 0;
        while let Some(found) = code[at..].find("crate::") {
            let start = at + found;
            at = start + "crate::".len();
            // `crate::` inside a longer name (`my_crate::`) is not the crate root.
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let in_test = is_test_file(file) || tests.iter().any(|r| r.contains(&start));
            for path in paths(&code[at..]) {
                let target = resolve(sources, &path);
                if &target != file {
                    targets.insert((target, in_test));
                }
            }
        }
    }
    out
}

/// A file of unit tests (`tests.rs`, or under a `tests/` folder) or of what they share
/// (`test_support.rs`): test code throughout, on no layer.
fn is_test_file(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name == "tests.rs" || name == "test_support.rs" || file.split('/').any(|d| d == "tests")
}

/// The paths written after a `crate::`: one, or each member of a `{...}` group.
fn paths(rest: &str) -> Vec<Vec<String>> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut end = group.len();
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        let mut out = Vec::new();
        let mut depth = 0;
        let mut member = String::new();
        for c in group[..end].chars().chain([',']) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(paths(&member).into_iter().take(1));
                    member.clear();
                    continue;
                }
                _ => {}
            }
            member.push(c);
        }
        return out;
    }
    let mut segments = Vec::new();
    let mut rest = rest;
    loop {
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        segments.push(rest[..len].to_owned());
        match rest[len..].strip_prefix("::") {
            Some(next) if !next.starts_with('{') => rest = next,
            _ => break,
        }
    }
    if segments.is_empty() {
        Vec::new()
    } else {
        vec![segments]
    }
}

/// The file that defines the longest module prefix of `path`; `lib.rs` for the root.
fn resolve(sources: &BTreeMap<String, String>, path: &[String]) -> String {
    let mut best = "lib.rs".to_owned();
    for n in 1..=path.len() {
        let dir = path[..n].join("/");
        for candidate in [format!("{dir}.rs"), format!("{dir}/mod.rs")] {
            if sources.contains_key(&candidate) {
                best = candidate;
            }
        }
    }
    best
}

/// `code` with comments and the insides of string and char literals blanked out, byte for
/// byte (so offsets still match).
fn strip(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = code[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = code[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = code[body..]
                    .find(&close)
                    .map_or(b.len(), |n| body + n + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    code[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else {
                    let ch = code[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The byte ranges of `#[cfg(test)]` modules in (stripped) `code`.
fn test_spans(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("#[cfg(test)]") {
        let start = at + found;
        at = start + 1;
        let after = &code[start + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        if !item.starts_with("mod ") {
            continue;
        }
        let Some(open) = item.find(['{', ';']) else {
            continue;
        };
        if item.as_bytes()[open] == b';' {
            continue;
        }
        let body = code.len() - item.len() + open;
        let mut depth = 0;
        let mut end = code.len();
        for (i, c) in code[body..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = body + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        spans.push(start..end);
    }
    spans
}

/// Every set of two or more files that reach each other in a loop (strongly connected
/// components, Tarjan's algorithm), each sorted.
fn loops(reaches: &Reaches) -> Vec<Vec<String>> {
    struct Search<'a> {
        graph: &'a BTreeMap<String, Vec<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let graph: BTreeMap<String, Vec<String>> = reaches
        .iter()
        .map(|(from, to)| (from.clone(), to.iter().map(|(t, _)| t.clone()).collect()))
        .collect();
    let mut search = Search {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !search.index.contains_key(v.as_str()) {
            search.visit(v);
        }
    }
    search.found
}
