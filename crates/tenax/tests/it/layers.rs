//! The layers of docs/architecture.md ("Who may import whom"), held by tests.
//!
//! Between crates, Cargo holds them: a crate can name only the crates its manifest lists, and
//! [`each_crate_depends_only_on_crates_below_it`] keeps the manifests in [`CRATES`]' order.
//! Within a crate, a top-level module may name only modules of the layers below its own, and the
//! modules of one layer know nothing of each other, so no two import each other, directly or
//! around a circle; the tables are [`CORE`] and [`SERVER`].
//!
//! The module tests read `src/**/*.rs` as text and find every path through the crate root:
//! `crate::x…` (`use` or not, grouped `crate::{x, y::z}` included) and a `super::` that climbs
//! to the root; and the paths that name another crate of the workspace. Comments and literals
//! are left out; unit tests count like any other code. When one fails, it names each upward
//! import by file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers, bottom first; each names its top-level modules.
type Layers = &'static [(&'static str, &'static [&'static str])];

/// The workspace's crates, bottom first, as the layers they are: each may depend only on crates
/// of the entries before its own. Change the table in docs/architecture.md with this one.
const CRATES: &[&[&str]] = &[
    &["tenax-policy", "tenax-client"],
    &["tenax-core"],
    &["tenax-net"],
    &["tenax-embedded", "tenax-postgres"],
    &["tenax-pools"],
    &["tenax-bench"],
    &["tenax"],
    &["tenax-fuzzing", "tenax-man"],
];

/// `tenax-core`'s modules, bottom first.
const CORE: Layers = &[
    ("time, errors", &["clock", "errors"]),
    ("the domain's values", &["model"]),
    ("tokens and scopes, sealing keys", &["auth", "secrets"]),
    ("the storage seam", &["store"]),
    ("metrics, spans", &["metrics", "otel"]),
    ("the engine", &["engine"]),
];

/// `tenax`'s modules (the server and the command line), bottom first.
const SERVER: Layers = &[
    (
        "charts, the HTTP listener, span export",
        &["chart", "serve", "otlp"],
    ),
    ("opening a store, offline work", &["storage", "offline"]),
    ("webhook delivery", &["delivery"]),
    ("the APIs", &["api"]),
    ("the dashboard", &["ui"]),
    ("assembly", &["app", "config"]),
    ("the server", &["server"]),
    ("the command line", &["cli"]),
];

/// The crate roots, which only declare the modules.
const ROOTS: [&str; 2] = ["lib.rs", "main.rs"];

fn src_of(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src")
}

#[test]
fn no_module_of_the_core_imports_from_its_own_layer_or_above() {
    check_layers("tenax-core", CORE);
}

#[test]
fn no_module_of_the_server_imports_from_its_own_layer_or_above() {
    check_layers("tenax", SERVER);
}

fn check_layers(krate: &str, layers: Layers) {
    let src = src_of(krate);
    let mut files = Vec::new();
    rust_files(&src, &mut files);

    let mut present = BTreeSet::new();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let module = module_path(relative);
        let Some(own) = module.first() else {
            continue;
        };
        present.insert(own.clone());
        let Some(own_layer) = layer_of(layers, own) else {
            unplaced.insert(own.clone());
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        for import in root_imports(&module, &code_only(&text)) {
            if import.module == *own {
                continue;
            }
            match layer_of(layers, &import.module) {
                Some(layer) if layer < own_layer => {}
                Some(layer) => upward.push(format!(
                    "{krate}/src/{}:{}: {own} (layer {}, {}) imports {} (layer {}, {})",
                    relative.display(),
                    import.line,
                    own_layer + 1,
                    layers[own_layer].0,
                    import.module,
                    layer + 1,
                    layers[layer].0,
                )),
                None => {
                    unplaced.insert(import.module);
                }
            }
        }
    }
    let listed: BTreeSet<String> = layers
        .iter()
        .flat_map(|(_, modules)| modules.iter().map(|m| (*m).to_owned()))
        .collect();
    let stale: Vec<_> = listed.difference(&present).collect();

    let mut failures = Vec::new();
    if !upward.is_empty() {
        failures.push(format!(
            "{} imports from the module's own layer or above (docs/architecture.md, \"Who may \
             import whom\"):\n  {}",
            upward.len(),
            upward.join("\n  ")
        ));
    }
    if !unplaced.is_empty() {
        failures.push(format!(
            "top-level modules of {krate} in no layer (place them in its table here and in \
             docs/architecture.md): {unplaced:?}"
        ));
    }
    if !stale.is_empty() {
        failures.push(format!(
            "the table of {krate} names modules that do not exist: {stale:?}"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_tables_name_each_crate_and_module_once() {
    for layers in [CORE, SERVER] {
        let mut seen = BTreeSet::new();
        for (_, modules) in layers {
            for module in *modules {
                assert!(seen.insert(*module), "{module} is in two layers");
            }
        }
    }
    let mut seen = BTreeSet::new();
    for krate in CRATES.iter().flat_map(|layer| layer.iter()) {
        assert!(seen.insert(*krate), "{krate} is in two layers");
    }
}

/// Each crate's `[dependencies]` (not its tests') names only workspace crates of the layers
/// below its own; and every crate of the workspace is in [`CRATES`].
#[test]
fn each_crate_depends_only_on_crates_below_it() {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut on_disk = BTreeSet::new();
    for entry in std::fs::read_dir(&crates_dir).expect("the crates directory") {
        let path = entry.expect("an entry").path();
        if path.join("Cargo.toml").is_file() {
            on_disk.insert(
                path.file_name()
                    .expect("a name")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    let listed: BTreeSet<String> = CRATES
        .iter()
        .flat_map(|layer| layer.iter().map(|c| (*c).to_owned()))
        .collect();
    assert_eq!(on_disk, listed, "crates/ and CRATES differ");

    let layer = |krate: &str| CRATES.iter().position(|l| l.contains(&krate));
    let mut upward = Vec::new();
    for krate in &listed {
        let own = layer(krate).expect("listed");
        let manifest =
            std::fs::read_to_string(crates_dir.join(krate).join("Cargo.toml")).expect("a manifest");
        for dependency in workspace_dependencies(&manifest) {
            match layer(&dependency) {
                Some(theirs) if theirs < own => {}
                _ => upward.push(format!("{krate} depends on {dependency}")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "crates depending on their own layer or above (docs/architecture.md):\n  {}",
        upward.join("\n  ")
    );
}

/// The `tenax…` crates named in a manifest's `[dependencies]` section.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut section = "";
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[dependencies]" {
            continue;
        }
        let name = line
            .split(['.', '=', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if name.starts_with("tenax") {
            found.push(name.to_owned());
        }
    }
    found
}

/// The places that may name the storage seam or a store: in the server, opening a store
/// (`storage`), offline work (`offline`) and the flags that choose a store's options
/// (`config`); the stores themselves; the core. Everything else speaks the engine's language
/// (docs/architecture.md, "Which type belongs to which layer").
const MAY_NAME_A_STORE: &[&str] = &["storage", "offline", "config"];

#[test]
fn nothing_above_the_engine_names_the_seam_or_a_store() {
    let mut naming = Vec::new();
    for krate in ["tenax", "tenax-bench"] {
        let src = src_of(krate);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in &files {
            let relative = file.strip_prefix(&src).expect("under src");
            let module = module_path(relative);
            if krate == "tenax"
                && module
                    .first()
                    .is_none_or(|m| MAY_NAME_A_STORE.contains(&m.as_str()))
            {
                continue;
            }
            let text = std::fs::read_to_string(file).expect("readable source");
            for (line, path) in crate_paths(&code_only(&text)) {
                if path == ["tenax_core", "store"]
                    || path[0] == "tenax_embedded"
                    || path[0] == "tenax_postgres"
                    || path[0] == "tenax_pools"
                {
                    naming.push(format!("{krate}/src/{}:{line}", relative.display()));
                }
            }
        }
    }
    assert!(
        naming.is_empty(),
        "{} places above the engine name the seam or a store; ask the engine (or the model) \
         instead:\n  {}",
        naming.len(),
        naming.join("\n  ")
    );
}

/// The stores implement the seam; the engine, above it, is not theirs to call.
#[test]
fn the_stores_do_not_name_the_engine() {
    let mut naming = Vec::new();
    for krate in ["tenax-embedded", "tenax-postgres", "tenax-pools"] {
        let src = src_of(krate);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in &files {
            let relative = file.strip_prefix(&src).expect("under src");
            let text = std::fs::read_to_string(file).expect("readable source");
            for (line, path) in crate_paths(&code_only(&text)) {
                if path == ["tenax_core", "engine"] {
                    naming.push(format!("{krate}/src/{}:{line}", relative.display()));
                }
            }
        }
    }
    assert!(
        naming.is_empty(),
        "the stores name the engine:\n  {}",
        naming.join("\n  ")
    );
}

/// Each path that starts with a workspace crate (`tenax_core::store::X`, or a group under it):
/// its line and first two segments (one when the path stops at the crate).
fn crate_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let tokens = tokens(code);
    let mut found = Vec::new();
    for (i, (line, token)) in tokens.iter().enumerate() {
        let Token::Word(krate) = token else { continue };
        if !krate.starts_with("tenax_") || (i > 0 && tokens[i - 1].1 == Token::Path) {
            continue;
        }
        if tokens.get(i + 1).map(|t| &t.1) != Some(&Token::Path) {
            found.push((*line, vec![krate.clone()]));
            continue;
        }
        let seconds = first_segments(&tokens, i + 2);
        if seconds.is_empty() {
            found.push((*line, vec![krate.clone()]));
        }
        for second in seconds {
            found.push((*line, vec![krate.clone(), second]));
        }
    }
    found
}

/// The index in `layers` of the layer holding `module`.
fn layer_of(layers: Layers, module: &str) -> Option<usize> {
    layers
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// Every `.rs` file under `dir`, in a stable order.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a readable source directory")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The module path of a file under `src` (`api/zaqar/error.rs`: `api::zaqar::error`;
/// `api/mod.rs`: `api`); empty for the crate roots.
fn module_path(relative: &Path) -> Vec<String> {
    if relative.to_str().is_some_and(|r| ROOTS.contains(&r)) {
        return Vec::new();
    }
    let mut path: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = path.pop().expect("a file name");
    if last != "mod.rs" {
        path.push(last.trim_end_matches(".rs").to_owned());
    }
    path
}

/// The source with every comment, string and character literal blanked out; lines are kept,
/// so positions still give line numbers.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    // Blanks `chars[from..to]`, keeping line breaks.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let after_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && at(i + 1) == '/' {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if at(j) == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 2;
                } else if at(j) == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == 'r'
            && matches!(at(i + 1), '"' | '#')
            && (!after_ident || (chars[i - 1] == 'b' && !(i > 1 && ident(chars[i - 2]))))
        {
            // A raw string: r"…", r#"…"#, br#"…"#.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if at(i + 1 + hashes) != '"' {
                // `r#ident`, a raw identifier.
                out.push(c);
                i += 1;
                continue;
            }
            let mut j = i + 2 + hashes;
            while j < chars.len() && !(chars[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            let end = j + 1 + hashes;
            blank(&mut out, i, end);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal; `'a` without a closing quote is a lifetime or a label.
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '\'' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A top-level module named through the crate root.
#[derive(Debug, PartialEq, Eq)]
struct Import {
    line: usize,
    module: String,
}

/// A token of code: a word (identifier or keyword) or one punctuation character, `::` as one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((line, Token::Word(chars[start..i].iter().collect())));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, Token::Path));
            i += 2;
        } else {
            out.push((line, Token::Punct(c)));
            i += 1;
        }
    }
    out
}

/// The top-level modules that the code of the module at `module` names through the crate root.
fn root_imports(module: &[String], code: &str) -> Vec<Import> {
    let tokens = tokens(code);
    let word = |i: usize| match tokens.get(i) {
        Some((_, Token::Word(w))) => Some(w.as_str()),
        _ => None,
    };
    let is = |i: usize, token: &Token| tokens.get(i).is_some_and(|(_, t)| t == token);
    // The open braces, each `true` if an inline module's (`mod tests { … }`): `super` climbs it.
    let mut braces: Vec<bool> = Vec::new();
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (line, token) = &tokens[i];
        match token {
            Token::Punct('{') => {
                let inline_module = i >= 2 && word(i - 2) == Some("mod") && word(i - 1).is_some();
                braces.push(inline_module);
            }
            Token::Punct('}') => {
                braces.pop();
            }
            // `$crate` is a macro's own crate, whichever uses it.
            Token::Word(w)
                if w == "crate"
                    && is(i + 1, &Token::Path)
                    && (i == 0 || !is(i - 1, &Token::Punct('$'))) =>
            {
                for name in first_segments(&tokens, i + 2) {
                    found.push(Import {
                        line: *line,
                        module: name,
                    });
                }
            }
            Token::Word(w) if w == "super" && (i == 0 || !is(i - 1, &Token::Path)) => {
                let mut climbs = 0;
                let mut j = i;
                while word(j) == Some("super") && is(j + 1, &Token::Path) {
                    climbs += 1;
                    j += 2;
                }
                let depth = module.len() + braces.iter().filter(|&&m| m).count();
                if climbs > 0 && climbs == depth {
                    for name in first_segments(&tokens, j) {
                        found.push(Import {
                            line: *line,
                            module: name,
                        });
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The first segment of each path starting at `tokens[at]`: one name, or each of a group's
/// (`{engine::Engine, store::{self, StoreError}}`: `engine`, `store`).
fn first_segments(tokens: &[(usize, Token)], at: usize) -> Vec<String> {
    match tokens.get(at) {
        Some((_, Token::Word(w))) if w != "self" => vec![w.clone()],
        Some((_, Token::Punct('{'))) => {
            let mut names = Vec::new();
            let mut depth = 0;
            let mut item_start = false;
            for (_, token) in &tokens[at..] {
                match token {
                    Token::Punct('{') => {
                        depth += 1;
                        if depth == 1 {
                            item_start = true;
                            continue;
                        }
                    }
                    Token::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Token::Punct(',') if depth == 1 => {
                        item_start = true;
                        continue;
                    }
                    Token::Word(w) if depth == 1 && item_start && w != "self" => {
                        names.push(w.clone());
                    }
                    _ => {}
                }
                item_start = false;
            }
            names
        }
        _ => Vec::new(),
    }
}

#[test]
fn the_scanner_reads_paths_through_the_root_and_nothing_else() {
    let code = code_only(
        r##"
use crate::engine::Engine;
use crate::{store::{self, StoreError}, model::Job};
// crate::api in a comment
/* crate::ui /* nested */ crate::ui */
let s = "crate::server"; let r = r#"crate::cli "quoted""#; let c = '"'; let q = '\'';
fn f<'a>(x: &'a str) { crate::clock::now(); $crate::metrics::x(); }
use super::delivery::Deliveries;
mod tests {
    use super::*;
    use super::super::otel;
}
"##,
    );
    let found = root_imports(&["config".to_owned()], &code);
    let found: Vec<(usize, &str)> = found.iter().map(|i| (i.line, i.module.as_str())).collect();
    assert_eq!(
        found,
        [
            (2, "engine"),
            (3, "store"),
            (3, "model"),
            (7, "clock"),
            (8, "delivery"),
            (11, "otel"),
        ]
    );
    // From `api/guard.rs`, one `super` stays in `api`.
    let code = code_only("use super::error::ApiError;\nuse super::super::ui;\n");
    let found = root_imports(&["api".to_owned(), "guard".to_owned()], &code);
    assert_eq!(
        found,
        [Import {
            line: 2,
            module: "ui".to_owned()
        }]
    );
}
