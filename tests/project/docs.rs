//! The docs' own rules, checked: every public function that returns a `Result` says when it
//! fails (an `# Errors` section, as `clippy::missing_errors_doc` asks, checked here too so
//! that the test command holds the crate to it); every cargo feature is in the README's
//! table and in the crate docs; every test the docs cite (`file::test`, `module::test`)
//! exists at exactly that path, and every file they cite exists; the mutants page has a row
//! for every mutant the committed runs missed, and their totals.

use std::collections::BTreeSet;
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
        // The function's own return type, not a bound's (`where F: Fn(..) -> Result<..>`).
        let head = signature.split(" where").next().unwrap_or(&signature);
        if !head.contains("-> Result<") {
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
    assert_eq!(
        features,
        [
            "from-env",
            "signal",
            "json",
            "metrics",
            "tower",
            "opentelemetry",
            "s3",
            "dynamodb",
            "lambda"
        ]
    );
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

/// The README is read on crates.io and docs.rs, from the published package: every file of the
/// repository its prose names is in the package (`include` in `Cargo.toml`), or a link to the
/// file in the repository, so that it resolves there too.
#[test]
fn the_readmes_files_resolve_from_the_published_package() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let value_of = |key: &str| {
        let line = manifest
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in Cargo.toml"));
        line.split_once(" = ").unwrap().1.to_owned()
    };
    let repository = value_of("repository").trim_matches('"').to_owned();
    let include = value_of("include");
    let included: Vec<&str> = include
        .trim_matches(['[', ']'])
        .split(',')
        .map(|p| p.trim().trim_matches('"').trim_start_matches('/'))
        .collect();
    let in_package = |path: &str| {
        path == "Cargo.toml"
            || included
                .iter()
                .any(|i| path == *i || path.starts_with(&format!("{i}/")))
    };
    // The prose: code blocks are commands run in a clone.
    let prose: String = readme
        .split("```")
        .step_by(2)
        .collect::<Vec<_>>()
        .join("\n");
    let mut named = 0;
    for token in quoted(&prose) {
        let path = token.split('#').next().unwrap_or(token);
        if path.is_empty() || !root.join(path).is_file() {
            continue;
        }
        named += 1;
        let link = format!("[`{token}`]({repository}/blob/main/{path}");
        assert!(
            in_package(path) || prose.contains(&link),
            "the README names `{token}`, which the package leaves out: link it as {link})"
        );
    }
    assert!(named >= 3, "the README names files: {named} found");
    assert!(!in_package("CONTRIBUTING.md") && !in_package("scripts/test.sh"));
}

/// The `Cargo.toml` lines the lambda page gives a function's crate: the crate's version as
/// published, and one TLS stack in the dependency tree (one rustls, no hyper 0.14), as the
/// page says. `cargo tree` resolves them against this checkout, offline if it can.
#[test]
fn the_lambda_pages_dependencies_resolve_to_one_tls_stack() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/lambda.md")).unwrap();
    let lines = page
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the lambda page's Cargo.toml lines");
    let ours = lines
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("sqs-consumer = "))
        .expect("the crate's own line");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap()
        .trim_matches('"');
    let wanted = ours
        .split("version = \"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .unwrap();
    assert!(
        version.starts_with(&format!("{wanted}.")),
        "the page asks for {wanted}, the crate is {version}"
    );
    assert!(ours.contains("features = [\"lambda\"]"), "{ours}");
    let local = format!(
        "sqs-consumer = {{ path = {:?}, features = [\"lambda\"] }}",
        root.display().to_string()
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lambda-function");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    let toml = format!(
        "[package]\nname = \"function\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n{}",
        lines.replace(ours, &local)
    );
    std::fs::write(dir.join("Cargo.toml"), toml).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let tree = |offline: bool| {
        let mut command = std::process::Command::new(&cargo);
        command
            .args([
                "tree",
                "-e",
                "normal",
                "--prefix",
                "none",
                "--manifest-path",
            ])
            .arg(dir.join("Cargo.toml"));
        if offline {
            command.arg("--offline");
        }
        command.output().expect("cargo runs")
    };
    let mut out = tree(true);
    if !out.status.success() {
        out = tree(false);
    }
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let versions = |name: &str| -> BTreeSet<String> {
        listed
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{name} v")))
            .map(|v| v.split(' ').next().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(listed.contains("sqs-consumer v"), "{listed}");
    assert_eq!(
        versions("rustls").len(),
        1,
        "rustls {:?}",
        versions("rustls")
    );
    assert!(
        versions("hyper").iter().all(|v| !v.starts_with("0.")),
        "hyper {:?}",
        versions("hyper")
    );
}

/// The pages that cite tests.
const PAGES: &[&str] = &[
    "README.md",
    "CONTRIBUTING.md",
    "benches/README.md",
    "benches/notes.md",
    "contributing/mutants.md",
    "contributing/claims.md",
];

fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths: Vec<PathBuf> = PAGES.iter().map(|p| root.join(p)).collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        paths.push(entry.unwrap().path());
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.display().to_string(), text)
        })
        .collect()
}

/// The backquoted words of `text`.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The files a cited module path can name: `tests/<path>.rs` and `tests/<path>/main.rs` (a
/// test binary and its modules), or `src/<path>.rs` and `src/<path>/mod.rs`.
fn module_files(root: &Path, modules: &[&str]) -> Vec<PathBuf> {
    let path = modules.join("/");
    vec![
        root.join("tests").join(format!("{path}.rs")),
        root.join("tests").join(&path).join("main.rs"),
        root.join("src").join(format!("{path}.rs")),
        root.join("src").join(path).join("mod.rs"),
    ]
}

/// Where a cited test `module::...::name` is: `Ok(true)` found in the file its module path
/// names, `Ok(false)` not a test citation at all (no such test file or source module, and a
/// short name: `tokio::time`, `std::thread::sleep`), `Err` a citation that names no test
/// there, or a test's name in a module that no file holds (a file renamed since).
fn resolve(root: &Path, cited: &str) -> Result<bool, String> {
    let parts: Vec<&str> = cited.split("::").collect();
    let (name, modules) = parts.split_last().expect("a path");
    // The longest prefix of the path that names a file: the rest are inline modules
    // (`error::tests::...` is in `src/error.rs`).
    let files: Vec<PathBuf> = (1..=modules.len())
        .rev()
        .map(|k| {
            module_files(root, &modules[..k])
                .into_iter()
                .filter(|f| f.exists())
                .collect::<Vec<_>>()
        })
        .find(|files| !files.is_empty())
        .unwrap_or_default();
    if files.is_empty() {
        // A test's name is a sentence; `tokio::time` or `std::thread::sleep` is not.
        return match name.matches('_').count() {
            0..=2 => Ok(false),
            _ => Err(format!("`{cited}`: no file of {modules:?}")),
        };
    }
    if name.contains('*') {
        return Ok(true); // a family of tests, in a file that exists
    }
    // `on_both!(name)` makes `name::memory` and `name::server` of the function `name`.
    let defined_as = match (*name, modules.last()) {
        ("memory" | "server", Some(parent)) if modules.len() > 1 => *parent,
        _ => *name,
    };
    let defined = files.iter().any(|f| {
        let source = std::fs::read_to_string(f).unwrap();
        // A generic function is cited by its name too.
        ["(", "<"].iter().any(|open| {
            source.contains(&format!("fn {name}{open}"))
                || source.contains(&format!("fn {defined_as}{open}"))
        })
    });
    if defined {
        Ok(true)
    } else {
        Err(format!("`{cited}`: no `fn {name}(` in {files:?}"))
    }
}

#[test]
fn every_test_the_docs_cite_exists_at_its_exact_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut cited, mut wrong) = (0, Vec::new());
    for (page, text) in pages() {
        for word in quoted(text.as_str()) {
            let is_path = word.contains("::")
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:*".contains(c));
            if !is_path {
                continue;
            }
            match resolve(root, word) {
                Ok(true) => cited += 1,
                Ok(false) => {}
                Err(err) => wrong.push(format!("{page}: {err}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "cited tests that are not there: {wrong:#?}"
    );
    assert!(cited >= 30, "only {cited} cited tests found");
}

/// The mutants page's table "Files renamed since the run": old path -> new path.
fn renamed_since_the_mutants_run(root: &Path) -> std::collections::BTreeMap<String, String> {
    let page = std::fs::read_to_string(root.join("contributing/mutants.md")).unwrap();
    section(&page, "Files renamed since the run")
        .lines()
        .filter_map(|row| {
            let mut files = quoted(row);
            Some((files.next()?.to_owned(), files.next()?.to_owned()))
        })
        .collect()
}

/// The modules cargo-mutants examines (`.cargo/mutants.toml`) are files of today: a file
/// renamed and not listed again would go unmutated without a word.
#[test]
fn every_module_cargo_mutants_examines_is_a_file_of_today() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = std::fs::read_to_string(root.join(".cargo/mutants.toml")).unwrap();
    let globs = config
        .split("examine_globs = [")
        .nth(1)
        .expect("examine_globs");
    let globs = globs.split(']').next().unwrap_or_default();
    let files: Vec<&str> = globs.split('"').skip(1).step_by(2).collect();
    assert!(files.len() >= 30, "{files:?}");
    let gone: Vec<_> = files.iter().filter(|f| !root.join(f).exists()).collect();
    assert!(gone.is_empty(), "examined but not there: {gone:?}");
}

#[test]
fn every_file_the_docs_cite_as_tests_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let renamed = renamed_since_the_mutants_run(root);
    assert!(renamed.len() >= 10, "{renamed:?}");
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        for word in quoted(text.as_str()) {
            let is_file = word.ends_with(".rs")
                && !word.contains(' ')
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_/.".contains(c));
            if !is_file {
                continue;
            }
            // From the root, from `src/`, or from the page's own folder; on the mutants page,
            // by the name it had when the run was made.
            let beside = Path::new(&page).with_file_name(word);
            let now = match page.ends_with("mutants.md") {
                true => renamed.get(&format!("src/{word}")).or(renamed.get(word)),
                false => None,
            };
            let exists = [root.join(word), root.join("src").join(word), beside]
                .iter()
                .chain(now.map(|now| root.join(now)).as_ref())
                .any(|p| p.exists());
            if !exists {
                wrong.push(format!("{page}: `{word}`"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "cited files that are not there: {wrong:#?}"
    );
}

#[test]
fn the_resolver_tells_a_wrong_citation_from_a_right_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(
        resolve(root, "queue::fidelity::an_extension_of_a_deleted_message"),
        Ok(true)
    );
    assert_eq!(
        resolve(root, "memory::seam::tests::batch_entry_ids_duplicates_and_partial_failures_are_answered_as_aws_does"),
        Ok(true)
    );
    // Right name, wrong file.
    assert!(resolve(root, "scenarios::an_extension_of_a_deleted_message").is_err());
    assert!(resolve(root, "delivery::no_such_test").is_err());
    assert_eq!(resolve(root, "tokio::time"), Ok(false));
    // A test of a file that is gone.
    assert!(resolve(root, "no_such_file::tests::a_test_that_moved_away").is_err());
}

/// The text of a page's section `## {heading}`, up to the next section.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let section = page
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no section \"## {heading}\""));
    section.split("\n## ").next().unwrap_or(section)
}

/// The rows of the table in `text`, but its header (the row starting with `header`).
fn table_rows<'a>(text: &'a str, header: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with(header))
        .collect()
}

#[test]
fn every_row_of_the_fidelity_table_cites_a_test() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/docs/testing.md")).unwrap();
    let section = section(&page, "Test servers and AWS");
    let rows = table_rows(section, "| Behaviour");
    assert!(rows.len() >= 10, "{} rows", rows.len());
    for row in rows {
        let tests = row.trim_end_matches('|').rsplit('|').next().unwrap();
        assert!(
            quoted(tests).any(|t| t.contains("::")),
            "a row without a test: {row}"
        );
    }
}

/// The record of the mutants runs (`contributing/mutants-record.txt`, written by
/// `scripts/mutants-figures.sh`): the mutants they missed (the shards' and each `--in-diff`
/// run's) and the totals line, `in all: C caught, M missed, U unviable, T timed out`.
fn mutant_record(root: &str) -> (Vec<String>, [usize; 4]) {
    let record =
        std::fs::read_to_string(format!("{root}/contributing/mutants-record.txt")).unwrap();
    let missed = record
        .split("\nmissed")
        .skip(1)
        .flat_map(|list| list.lines().skip(1).take_while(|l| !l.is_empty()))
        .map(str::to_owned)
        .collect();
    let totals = record
        .lines()
        .find_map(|l| l.strip_prefix("in all: "))
        .expect("a line `in all: ...`");
    let numbers: Vec<usize> = totals
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    (missed, numbers.try_into().expect("four totals"))
}

/// Whether a row of the mutants page names `mutant` (`src/f.rs:LINE:COL: what`): its first
/// cell names the file and the line, alone or in a list (`:LINE:`, `` :LINE` ``, `:LINE `).
fn has_row(rows: &[&str], mutant: &str) -> bool {
    let mut parts = mutant.splitn(3, ':');
    let (file, line) = (parts.next().unwrap(), parts.next().unwrap());
    rows.iter().any(|row| {
        row.contains(file)
            && row
                .match_indices(&format!(":{line}"))
                .any(|(at, m)| !row[at + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Every mutant the committed runs missed has its row on the mutants page (killed by a
/// named test, or left with a reason), and the page's totals are the committed ones.
#[test]
fn every_mutant_missed_has_its_row_and_the_totals_are_the_committed_ones() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/contributing/mutants.md")).unwrap();
    let rows: Vec<&str> = section(&page, "Mutants left alive")
        .lines()
        .filter(|l| l.starts_with("| `src/"))
        .map(|l| l.split(" | ").next().unwrap())
        .collect();
    let (missed, [caught, missed_in_all, unviable, timeout]) = mutant_record(root);
    assert!(
        missed.len() >= missed_in_all,
        "{} missed listed",
        missed.len()
    );
    for mutant in &missed {
        assert!(has_row(&rows, mutant), "no row for {mutant}");
    }
    let with_commas = |n: usize| match n {
        0..=999 => n.to_string(),
        _ => format!("{},{:03}", n / 1000, n % 1000),
    };
    let totals = format!(
        "{} caught, {} missed, {} unviable and {} timed out",
        with_commas(caught),
        with_commas(missed_in_all),
        with_commas(unviable),
        match timeout {
            0 => "none".to_owned(),
            n => with_commas(n),
        }
    );
    assert!(page.contains(&totals), "the page does not say {totals}");
}

#[test]
fn a_row_names_a_mutant_by_its_file_and_exact_line() {
    let rows = [
        "| `src/s3.rs:141:29: replace > with >=`",
        "| `src/batch.rs:264` and `:269`",
    ];
    assert!(has_row(&rows, "src/s3.rs:141:29: replace > with =="));
    assert!(has_row(&rows, "src/batch.rs:269:9: delete !"));
    assert!(!has_row(&rows, "src/s3.rs:14:29: replace > with =="));
    assert!(!has_row(&rows, "src/batch.rs:26:9: delete !"));
    assert!(!has_row(&rows, "src/rate_limit.rs:141:29: replace"));
}

/// The benchmarks page reads in two minutes: one short row per bench (what it measures, its
/// figure, its target), each with a row in the notes' "What each bench does"; the detail of
/// each figure lives in `benches/notes.md`.
#[test]
fn the_benchmarks_page_gives_one_short_row_per_bench() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/benches/README.md")).unwrap();
    let notes = std::fs::read_to_string(format!("{root}/benches/notes.md")).unwrap();
    assert!(page.len() <= 7 * 1024 + 512, "{} bytes", page.len());
    let table = section(&page, "What each measures, and where it stands");
    let rows = table_rows(table, "| bench ");
    assert!(rows.len() >= 15, "{} rows", rows.len());
    for row in rows {
        assert!(row.len() <= 240, "a row of {} bytes: {row}", row.len());
        assert_eq!(row.matches(" | ").count(), 3, "four cells: {row}");
        let bench = row[2..].split(' ').next().unwrap().trim_end_matches(',');
        assert!(
            notes.contains(&format!("\n### {bench} ")),
            "{bench} is not in benches/notes.md"
        );
    }
}

/// What crates.io and docs.rs show of the package is there: description, licence, links,
/// keywords (at most 5) and categories.
#[test]
fn the_package_carries_what_crates_io_shows() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let package = manifest
        .split("[package]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [package] table");
    let field = |name: &str| {
        package
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no `{name}` in [package]"))
            .trim_matches('"')
            .to_owned()
    };
    for link in ["repository", "homepage", "documentation"] {
        assert!(field(link).starts_with("https://"), "{link}");
    }
    assert_eq!(field("documentation"), "https://docs.rs/sqs-consumer");
    assert_eq!(field("license"), "MIT");
    assert!(!field("description").is_empty());
    let keywords = field("keywords");
    assert!((1..=5).contains(&keywords.split(',').count()), "{keywords}");
    assert!(!field("categories").is_empty());
}

/// Every file of `tests/` is named in CONTRIBUTING's table of test binaries (but a folder's
/// `main.rs` that only declares its modules), and every file the table names is there: a
/// newcomer finds a test's room from the table alone.
#[test]
fn every_test_file_is_in_contributings_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("CONTRIBUTING.md")).unwrap();
    let table: BTreeSet<&str> = page
        .lines()
        .filter(|l| l.trim_start().starts_with("| "))
        .flat_map(quoted)
        .filter(|w| w.starts_with("tests/") && w.ends_with(".rs"))
        .collect();
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    let declares_only =
        |f: &Path| f.ends_with("main.rs") && !std::fs::read_to_string(f).unwrap().contains("fn ");
    let files: BTreeSet<String> = files
        .iter()
        .filter(|f| !declares_only(f))
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(files.len() >= 30, "{files:?}");
    let unnamed: Vec<_> = files
        .iter()
        .filter(|f| !table.contains(f.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "not in CONTRIBUTING's table: {unnamed:?}"
    );
    let gone: Vec<_> = table.iter().filter(|f| !files.contains(**f)).collect();
    assert!(gone.is_empty(), "in the table but not in tests/: {gone:?}");
}
