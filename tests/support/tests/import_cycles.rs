//! No import circles: within each workspace crate, no two sibling modules depend on each
//! other, directly or around a longer loop (issue 28, point 2).
//!
//! `cargo test -p batchbridge-testbed --test import_cycles` reads every library and binary
//! target that `cargo metadata` lists, follows its `mod` declarations from the crate root,
//! and records a dependency wherever a module names another by a path: `use crate::…`,
//! `use super::…`, or `crate::a::b`/`super::b` in code. A path through a `use` (a re-export
//! such as `crate::JobId`) is followed to the module that defines the name, so a re-export
//! at the crate root hides no circle.
//!
//! What counts as a circle: a dependency from `a::x` to `b::y` counts as one from `a` to `b`,
//! the children of the deepest module both lie in, and a circle is a loop of such
//! dependencies among the children of one module. A module using its own parent or child
//! is nesting, not a circle. Test code (`#[cfg(test)]` items) is left out: a test may
//! reach across for fixtures without tying the modules it tests together.
//!
//! The reading is lexical (comments and string literals are skipped, macros are not
//! expanded); it needs nothing beyond std and `cargo metadata`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Circles known to remain while issue 28 is under way: each entry is a crate (or binary)
/// and the members of one circle, sorted. The test fails on any circle not listed here and on any
/// entry no longer found, so this list only shrinks; it is empty when the issue is done.
const KNOWN_CIRCLES: &[&str] = &[];

#[test]
fn no_import_circles_beyond_the_known_ones() {
    let mut found = BTreeMap::new();
    let (workspace, roots) = crate_roots();
    for (package, root) in roots {
        let graph = Crate::read(&root, &workspace);
        for circle in graph.circles() {
            let evidence = circle.evidence.join("\n    ");
            found.insert(
                format!("{package}: {}", circle.members.join(" ⇄ ")),
                evidence,
            );
        }
    }
    let known: BTreeSet<String> = KNOWN_CIRCLES.iter().map(|c| c.to_string()).collect();
    let new: Vec<_> = found.keys().filter(|c| !known.contains(*c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains_key(*c)).collect();
    for (circle, evidence) in &found {
        eprintln!("{circle}\n    {evidence}");
    }
    assert!(
        new.is_empty() && gone.is_empty(),
        "new circles: {new:#?}\nknown circles no longer found: {gone:#?}\n\
         KNOWN_CIRCLES should be exactly: {:#?}",
        found.keys().collect::<Vec<_>>()
    );
}

/// The workspace's directory and the library and binary roots of its members, as (target,
/// root file): a library is named by its package, a binary by its package and name.
fn crate_roots() -> (PathBuf, Vec<(String, PathBuf)>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let text = |value: &serde_json::Value| value.as_str().expect("a string").to_owned();
    let mut roots = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            let kind = target["kind"].as_array().expect("kind");
            let name = if kind.iter().any(|k| k == "lib" || k == "proc-macro") {
                text(&package["name"])
            } else if kind.iter().any(|k| k == "bin") {
                format!("{} (bin {})", text(&package["name"]), text(&target["name"]))
            } else {
                continue;
            };
            roots.push((name, PathBuf::from(text(&target["src_path"]))));
        }
    }
    assert!(!roots.is_empty(), "cargo metadata lists no targets");
    (PathBuf::from(text(&metadata["workspace_root"])), roots)
}

/// A module path inside one crate; the crate root is the empty path.
type ModPath = Vec<String>;

/// A path a module names, before resolution: absolute from the crate root once `crate`,
/// `super` and `self` are replaced, and where it was written.
struct Reference {
    from: ModPath,
    path: ModPath,
    place: String,
}

/// One crate's modules, the names each brings in with `use`, and every path they name.
#[derive(Default)]
struct Crate {
    /// Places are shown relative to this directory.
    workspace: PathBuf,
    modules: BTreeSet<ModPath>,
    /// Per module: the name a `use` binds, to the absolute path it stands for.
    imports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    references: Vec<Reference>,
    /// `use` paths as read; resolved once every module of the crate is known.
    uses: Vec<Use>,
}

/// A path in a `use` declaration, as written, and the name it binds (none for a glob).
struct Use {
    module: ModPath,
    path: Vec<String>,
    name: Option<String>,
    place: String,
}

/// A circle among sibling modules: their paths, and one dependency per step as evidence.
struct Circle {
    members: Vec<String>,
    evidence: Vec<String>,
}

impl Crate {
    fn read(root: &Path, workspace: &Path) -> Crate {
        let mut krate = Crate {
            workspace: workspace.to_owned(),
            ..Crate::default()
        };
        krate.read_file(root, root.parent().expect("src dir"), Vec::new());
        // In a `use`, a first segment that is no keyword names a child module (or another crate).
        for Use {
            module,
            path,
            name,
            place,
        } in std::mem::take(&mut krate.uses)
        {
            let child: ModPath = module.iter().chain(path.first()).cloned().collect();
            let absolute = if krate.modules.contains(&child) {
                Some(module.iter().chain(&path).cloned().collect())
            } else {
                absolute(&module, &path)
            };
            let Some(absolute) = absolute else { continue };
            if let Some(name) = name {
                krate
                    .imports
                    .entry(module.clone())
                    .or_default()
                    .insert(name, absolute.clone());
            }
            krate.references.push(Reference {
                from: module,
                path: absolute,
                place,
            });
        }
        krate
    }

    /// Reads the module `module` from `file`; its child modules' files lie in `dir`.
    fn read_file(&mut self, file: &Path, dir: &Path, module: ModPath) {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = tokens(&text);
        let mut reader = Reader {
            tokens: &tokens,
            at: 0,
            file,
            krate: self,
        };
        reader.items(dir, &module);
    }

    /// The module an absolute path lands in, following `use` bindings (a re-export is
    /// followed to where the name is defined).
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut module: ModPath = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains(&child) {
                module = child;
                continue;
            }
            let binding = self
                .imports
                .get(&module)
                .and_then(|names| names.get(segment));
            match binding {
                Some(target) if depth < 16 && target.as_slice() != &path[..=i] => {
                    let mut followed = target.clone();
                    followed.extend_from_slice(&path[i + 1..]);
                    return self.resolve(&followed, depth + 1);
                }
                _ => break,
            }
        }
        module
    }

    fn circles(&self) -> Vec<Circle> {
        // Per parent module: an edge between two of its children, with one place it is written.
        let mut edges: BTreeMap<ModPath, BTreeMap<(String, String), String>> = BTreeMap::new();
        for reference in &self.references {
            let to = self.resolve(&reference.path, 0);
            let common = reference
                .from
                .iter()
                .zip(&to)
                .take_while(|(a, b)| a == b)
                .count();
            if common == reference.from.len() || common == to.len() {
                continue; // one contains the other: nesting, not a circle
            }
            let pair = (reference.from[common].clone(), to[common].clone());
            let place = format!(
                "{} -> {} ({})",
                reference.from.join("::"),
                to.join("::"),
                reference.place
            );
            edges
                .entry(reference.from[..common].to_vec())
                .or_default()
                .entry(pair)
                .or_insert(place);
        }
        let mut circles = Vec::new();
        for (parent, siblings) in &edges {
            for component in strongly_connected(siblings.keys()) {
                let name = |child: &String| {
                    let mut path = parent.clone();
                    path.push(child.clone());
                    path.join("::")
                };
                let evidence = siblings
                    .iter()
                    .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                    .map(|(_, place)| place.clone())
                    .collect();
                circles.push(Circle {
                    members: component.iter().map(name).collect(),
                    evidence,
                });
            }
        }
        circles
    }
}

/// The strongly connected components of more than one node, each sorted (Tarjan's algorithm).
fn strongly_connected<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    struct Search<'s> {
        next: &'s BTreeMap<&'s str, Vec<&'s str>>,
        index: BTreeMap<&'s str, (usize, usize)>,
        stack: Vec<&'s str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'s> Search<'s> {
        fn visit(&mut self, node: &'s str) -> usize {
            let order = self.index.len();
            self.index.insert(node, (order, order));
            self.stack.push(node);
            let mut low = order;
            for &to in &self.next[node] {
                low = match self.index.get(to) {
                    None => low.min(self.visit(to)),
                    Some(&(seen, _)) if self.stack.contains(&to) => low.min(seen),
                    Some(_) => low,
                };
            }
            self.index.insert(node, (order, low));
            if low == order {
                let at = self
                    .stack
                    .iter()
                    .position(|&n| n == node)
                    .expect("on the stack");
                let component: BTreeSet<String> =
                    self.stack.drain(at..).map(String::from).collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
            low
        }
    }
    let mut search = Search {
        next: &next,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &node in next.keys() {
        if !search.index.contains_key(node) {
            search.visit(node);
        }
    }
    search.found
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
    /// `::`
    PathSep,
}

/// Rust source as identifiers and punctuation; comments, strings, characters, lifetimes and
/// numbers are dropped.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
        }
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                line += usize::from(chars[i] == '\n');
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 3;
                while at(i) != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let string_prefix = matches!(word.as_str(), "b" | "c");
            if (raw_prefix && matches!(at(i), '"' | '#')) || (string_prefix && at(i) == '"') {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                if at(i) != '"' {
                    continue; // a raw identifier, r#type: its word follows as a token
                }
                i += 1;
                let closing: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                while i < chars.len()
                    && !chars[i..].starts_with(&closing.chars().collect::<Vec<_>>())
                {
                    line += usize::from(chars[i] == '\n');
                    i += if !raw_prefix && chars[i] == '\\' {
                        2
                    } else {
                        1
                    };
                }
                i += closing.len();
            } else if !c.is_ascii_digit() {
                out.push((Token::Ident(word), line));
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Token::PathSep, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Walks one file's tokens, recording modules, `use` bindings and paths into the crate.
struct Reader<'t, 'k> {
    tokens: &'t [(Token, usize)],
    at: usize,
    file: &'t Path,
    krate: &'k mut Crate,
}

impl Reader<'_, '_> {
    fn peek(&self, ahead: usize) -> Option<&Token> {
        self.tokens.get(self.at + ahead).map(|(t, _)| t)
    }

    fn is(&self, ahead: usize, word: &str) -> bool {
        matches!(self.peek(ahead), Some(Token::Ident(w)) if w == word)
    }

    fn punct(&self, ahead: usize, c: char) -> bool {
        self.peek(ahead) == Some(&Token::Punct(c))
    }

    fn place(&self) -> String {
        let line = self.tokens.get(self.at).map_or(0, |(_, line)| *line);
        let file = self
            .file
            .strip_prefix(&self.krate.workspace)
            .unwrap_or(self.file);
        format!("{}:{line}", file.display())
    }

    /// Reads items of `module` until the brace that closes it (or the end of the file).
    fn items(&mut self, dir: &Path, module: &ModPath) {
        self.krate.modules.insert(module.clone());
        let mut depth = 0usize;
        while let Some(token) = self.peek(0).cloned() {
            match token {
                Token::Punct('#') if self.cfg_test_attribute() => self.skip_item(),
                Token::Punct('{') => {
                    depth += 1;
                    self.at += 1;
                }
                Token::Punct('}') => {
                    self.at += 1;
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                }
                Token::Ident(word) if word == "mod" => self.module(dir, module),
                Token::Ident(word) if word == "use" => self.use_declaration(module),
                Token::Ident(word)
                    if (word == "crate" || word == "super")
                        && self.peek(1) == Some(&Token::PathSep) =>
                {
                    let place = self.place();
                    let path = self.path();
                    if let Some(path) = absolute(module, &path) {
                        self.krate.references.push(Reference {
                            from: module.clone(),
                            path,
                            place,
                        });
                    }
                }
                _ => self.at += 1,
            }
        }
    }

    /// Whether `#[cfg(test)]` starts here; if so, moves past it.
    fn cfg_test_attribute(&mut self) -> bool {
        let words = ["[", "cfg", "(", "test", ")", "]"];
        let matches = words
            .iter()
            .enumerate()
            .all(|(i, w)| match self.peek(i + 1) {
                Some(Token::Ident(word)) => word == w,
                Some(Token::Punct(c)) => w.starts_with(*c),
                _ => false,
            });
        if matches {
            self.at += 1 + words.len();
        }
        matches
    }

    /// Moves past one item: to its `;`, or past its first braced block.
    fn skip_item(&mut self) {
        let mut depth = 0usize;
        while let Some(token) = self.peek(0).cloned() {
            self.at += 1;
            match token {
                Token::Punct(';') if depth == 0 => return,
                Token::Punct('{') | Token::Punct('(') | Token::Punct('[') => depth += 1,
                Token::Punct('}') if depth == 1 => return,
                Token::Punct('}') | Token::Punct(')') | Token::Punct(']') => {
                    depth = depth.saturating_sub(1)
                }
                _ => {}
            }
        }
    }

    /// `mod name;` (read from its file) or `mod name { … }` (read in place).
    fn module(&mut self, dir: &Path, parent: &ModPath) {
        let Some(Token::Ident(name)) = self.peek(1).cloned() else {
            self.at += 1;
            return;
        };
        self.at += 2;
        let mut module = parent.clone();
        module.push(name.clone());
        if self.punct(0, ';') {
            self.at += 1;
            let (flat, nested) = (
                dir.join(format!("{name}.rs")),
                dir.join(&name).join("mod.rs"),
            );
            let file = if flat.exists() { flat } else { nested };
            self.krate.read_file(&file, &dir.join(&name), module);
        } else if self.punct(0, '{') {
            self.at += 1;
            self.items(&dir.join(&name), &module);
        }
    }

    /// A path `a::b::c` starting here; stops before generics, braces or a glob.
    fn path(&mut self) -> Vec<String> {
        let mut path = Vec::new();
        while let Some(Token::Ident(word)) = self.peek(0).cloned() {
            path.push(word);
            self.at += 1;
            if self.peek(0) == Some(&Token::PathSep)
                && matches!(self.peek(1), Some(Token::Ident(_)))
            {
                self.at += 1;
            } else {
                break;
            }
        }
        path
    }

    /// `use …;`: its paths are resolved once every module of the crate is known.
    fn use_declaration(&mut self, module: &ModPath) {
        let place = self.place();
        self.at += 1;
        let mut bindings = Vec::new();
        self.use_tree(Vec::new(), &mut bindings);
        for (path, name) in bindings {
            self.krate.uses.push(Use {
                module: module.clone(),
                path,
                name,
                place: place.clone(),
            });
        }
    }

    /// One `use` tree under `prefix`: each path it names, with the name it binds (none for a glob).
    fn use_tree(&mut self, prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let mut path = prefix;
        if self.peek(0) == Some(&Token::PathSep) {
            self.at += 1; // `::name`: an external crate, which resolves to nothing
        }
        loop {
            match self.peek(0).cloned() {
                Some(Token::Ident(word)) => {
                    if word != "self" || path.is_empty() {
                        path.push(word);
                    }
                    self.at += 1;
                }
                Some(Token::Punct('*')) => {
                    self.at += 1;
                    out.push((path, None));
                    return;
                }
                Some(Token::Punct('{')) => {
                    self.at += 1;
                    while !self.punct(0, '}') && self.peek(0).is_some() {
                        self.use_tree(path.clone(), out);
                        if self.punct(0, ',') {
                            self.at += 1;
                        }
                    }
                    self.at += 1;
                    return;
                }
                _ => return,
            }
            if self.peek(0) != Some(&Token::PathSep) {
                break;
            }
            self.at += 1;
        }
        let mut name = path.last().cloned();
        if self.is(0, "as") {
            name = match self.peek(1) {
                Some(Token::Ident(alias)) if alias != "_" => Some(alias.clone()),
                _ => None,
            };
            self.at += 2;
        }
        out.push((path, name));
    }
}

/// `path` as written in `module`, made absolute; None for a path outside the crate.
fn absolute(module: &ModPath, path: &[String]) -> Option<ModPath> {
    let mut base = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => module.clone(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend_from_slice(rest);
    Some(base)
}

/// The reading itself, on a made-up crate: a circle through a re-export and `super`, and
/// what is no circle (nesting, test code, comments, strings).
#[test]
fn finds_a_circle_through_a_re_export_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("import-cycles-{}", std::process::id()));
    let files = [
        (
            "lib.rs",
            "mod a; mod b; mod c;\npub use a::Id;\n// use crate::c::X;\n",
        ),
        (
            "a.rs",
            "pub struct Id;\nmod inner { use super::super::b::Thing; }\n",
        ),
        (
            "b.rs",
            "pub struct Thing(crate::Id);\nconst S: &str = \"crate::c::Y\";\n",
        ),
        (
            "c/mod.rs",
            "mod d;\nuse self::d::Z;\n#[cfg(test)]\nmod tests { use crate::a::Id; }\n",
        ),
        (
            "c/d.rs",
            "pub struct Z;\nuse super::super::b::{self, Thing as T};\nfn f() -> char { '\"' }\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let circles = Crate::read(&dir.join("lib.rs"), &dir).circles();
    std::fs::remove_dir_all(&dir).expect("clean up");
    let members: Vec<_> = circles.iter().map(|c| c.members.join(" ⇄ ")).collect();
    assert_eq!(members, ["a ⇄ b"]);
    assert_eq!(
        circles[0].evidence,
        ["a::inner -> b (a.rs:2)", "b -> a (b.rs:1)"]
    );
}
