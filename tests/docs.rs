//! The docs' own rules, checked: every public function that returns a `Result` says when it
//! fails (an `# Errors` section, as `clippy::missing_errors_doc` asks, checked here too so
//! that the test command holds the crate to it), and every cargo feature is in the README's
//! table and in the crate docs.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The public functions of `source` that return a `Result` and have no `# Errors` in their
/// docs, by name (test modules skipped).
fn missing_errors_sections(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        if code.starts_with("mod tests") || code.starts_with("pub(crate) mod tests") {
            break; // test modules close the files that have them
        }
        let Some(rest) = code
            .strip_prefix("pub fn ")
            .or_else(|| code.strip_prefix("pub async fn "))
        else {
            continue;
        };
        let signature: String = lines[i..]
            .iter()
            .take_while(|l| !l.contains('{') && !l.trim_end().ends_with(';'))
            .chain(lines[i..].iter().find(|l| l.contains('{')))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        if !signature.contains("-> Result<") {
            continue;
        }
        let docs: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .take_while(|l| l.starts_with("///") || l.starts_with("#["))
            .collect();
        if !docs.iter().any(|l| l.trim() == "/// # Errors") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            missing.push(name);
        }
    }
    missing
}

#[test]
fn every_public_fallible_function_has_an_errors_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut missing = Vec::new();
    let mut checked_files = 0;
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        checked_files += 1;
        for name in missing_errors_sections(&source) {
            missing.push(format!("{}: {name}", file.display()));
        }
    }
    assert!(checked_files > 20, "read {checked_files} files");
    assert!(
        missing.is_empty(),
        "public functions returning a Result with no `# Errors` section: {missing:#?}"
    );
}

#[test]
fn the_checker_finds_a_missing_errors_section() {
    let source = "\
/// Sends.
///
/// # Errors
///
/// When it fails.
pub async fn documented() -> Result<(), Error> {}

/// Receives.
pub fn undocumented(
    n: u32,
) -> Result<u32, Error> {}

/// Infallible.
pub fn plain() -> u32 {}

pub(crate) fn internal() -> Result<(), Error> {}
";
    assert_eq!(missing_errors_sections(source), ["undocumented"]);
}

#[test]
fn every_feature_is_in_the_readme_table_and_the_crate_docs() {
    let root = env!("CARGO_MANIFEST_DIR");
    let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let lib = std::fs::read_to_string(format!("{root}/src/lib.rs")).unwrap();
    let features: Vec<&str> = manifest
        .split("\n[features]\n")
        .nth(1)
        .expect("a [features] table")
        .lines()
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| !name.starts_with('#') && *name != "default")
        .collect();
    assert_eq!(features, ["from-env", "json", "metrics"]);
    for feature in features {
        assert!(
            readme.contains(&format!("| `{feature}` |")),
            "feature {feature} is not in the README's table"
        );
        assert!(
            lib.contains(&format!("//! - `{feature}`")),
            "feature {feature} is not in the crate docs' list"
        );
    }
}
