//! Every relative link of the README and of `docs/*.md` resolves: the file (or directory) it
//! names exists, and for `file.md#anchor` the target has a heading of that anchor, as GitHub
//! makes them (lowercase, spaces to `-`, punctuation but `-` and `_` dropped, `-1`, `-2`… for a
//! heading repeated). Links to the web (`http:`, `https:`, `mailto:`) and links to a place in the
//! same page (`#anchor` alone) are not checked. Std only, no network.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root: this crate is `crates/plumb`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

/// README.md and every `docs/*.md`, sorted.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry of docs/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A link target found in a page, with its line (counted from 1).
#[derive(Debug)]
struct Link {
    line: usize,
    target: String,
}

/// The lines of `text` that are Markdown, not code: fenced blocks (``` or ~~~) are blanked, so
/// that line numbers stay right.
fn prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let opener = ['`', '~'].into_iter().find_map(|c| {
            let n = trimmed.chars().take_while(|&x| x == c).count();
            (n >= 3).then_some((c, n))
        });
        match (fence, opener) {
            (None, Some(open)) => {
                fence = Some(open);
                out.push(String::new());
            }
            (Some((c, n)), Some((c2, n2)))
                if c == c2 && n2 >= n && trimmed.trim_matches(c).trim().is_empty() =>
            {
                fence = None;
                out.push(String::new());
            }
            (Some(_), _) => out.push(String::new()),
            (None, None) => out.push(line.to_string()),
        }
    }
    out
}

/// `line` with its code spans (`` `…` ``, any number of backticks) replaced by spaces.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let ticks = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run of exactly as many backticks, if any.
        let mut j = i + ticks;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let run = chars[j..].iter().take_while(|&&c| c == '`').count();
                if run == ticks {
                    close = Some(j + run);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(std::iter::repeat_n(' ', end - i));
                i = end;
            }
            None => {
                out.extend(std::iter::repeat_n('`', ticks));
                i += ticks;
            }
        }
    }
    out
}

/// The targets of the inline links and images (`[text](target "title")`, `![alt](target)`) and
/// of the reference definitions (`[name]: target`) of one page.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text).iter().enumerate() {
        let line = without_code_spans(line);
        let line_no = n + 1;
        // A reference definition: `[name]: target`, up to three spaces in.
        let t = line.trim_start();
        if line.len() - t.len() <= 3
            && t.starts_with('[')
            && let Some(close) = t.find("]:")
            && !t[1..close].contains(']')
        {
            let target = t[close + 2..].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                found.push(Link {
                    line: line_no,
                    target: target.trim_matches(['<', '>']).to_string(),
                });
            }
            continue;
        }
        let bytes = line.as_bytes();
        let mut i = 0;
        while let Some(at) = line[i..].find("](") {
            let start = i + at + 2;
            // The target runs to the `)` that closes the one opened, spaces ending it (a title
            // may follow).
            let mut depth = 0usize;
            let mut end = start;
            while end < bytes.len() {
                match bytes[end] {
                    b'(' => depth += 1,
                    b')' if depth == 0 => break,
                    b')' => depth -= 1,
                    _ => {}
                }
                end += 1;
            }
            let inside = line[start..end].trim();
            let target = if let Some(rest) = inside.strip_prefix('<') {
                rest.split('>').next().unwrap_or("")
            } else {
                inside.split_whitespace().next().unwrap_or("")
            };
            if !target.is_empty() {
                found.push(Link {
                    line: line_no,
                    target: target.to_string(),
                });
            }
            i = end.min(bytes.len());
            if i >= bytes.len() {
                break;
            }
        }
    }
    found
}

/// Whether `target` leaves the repository: a URL with a scheme, or a place in the same page.
fn not_checked(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    lower.starts_with("http:")
        || lower.starts_with("https:")
        || lower.starts_with("mailto:")
        || target.starts_with('#')
}

/// `%XX` escapes decoded (a file name with a space is linked as `a%20b.md`).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The anchor GitHub gives a heading's text: inline Markdown taken off (code spans' backticks,
/// emphasis stars, a link's target), lowercased, spaces to `-`, and every character that is not
/// a letter, a digit, `-` or `_` dropped.
fn slug(heading: &str) -> String {
    // `[text](target)` reads as `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (ATX, `#` to `######`), repeated ones numbered as GitHub
/// numbers them.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = HashSet::new();
    for line in prose_lines(text) {
        let t = line.trim_start();
        if line.len() - t.len() > 3 {
            continue;
        }
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) {
            continue;
        }
        let rest = &t[hashes..];
        if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
            continue;
        }
        // A closing run of `#` is not part of the heading.
        let heading = rest.trim().trim_end_matches('#').trim_end();
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        let anchor = if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        *n += 1;
        out.insert(anchor);
    }
    out
}

/// What is wrong with `target` linked from `page`, if anything.
fn broken(
    page: &Path,
    target: &str,
    cache: &mut BTreeMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    // A query (`?plain=1`) does not name a file.
    let path = path.split('?').next().unwrap_or(path);
    let dir = page.parent().expect("a page is in a directory");
    let resolved = if let Some(from_root) = path.strip_prefix('/') {
        root().join(from_root)
    } else {
        dir.join(percent_decoded(path))
    };
    let shown = |p: &Path| {
        let root = root();
        p.strip_prefix(&root).unwrap_or(p).display().to_string()
    };
    if !resolved.exists() {
        return Some(format!("{} does not exist", shown(&resolved)));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if resolved.extension().is_none_or(|e| e != "md") || resolved.is_dir() {
        return None;
    }
    let anchors = cache
        .entry(resolved.clone())
        .or_insert_with(|| anchors(&fs::read_to_string(&resolved).unwrap_or_default()));
    let anchor = percent_decoded(anchor).to_lowercase();
    (!anchors.contains(&anchor)).then(|| {
        format!(
            "{} has no heading whose anchor is #{anchor}",
            shown(&resolved)
        )
    })
}

#[test]
fn every_relative_link_of_the_readme_and_the_docs_resolves() {
    let root = root();
    let mut cache = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages(&root) {
        let text = fs::read_to_string(&page).expect("a page");
        let shown = page
            .strip_prefix(&root)
            .unwrap_or(&page)
            .display()
            .to_string();
        for link in links(&text) {
            if not_checked(&link.target) {
                continue;
            }
            checked += 1;
            if let Some(why) = broken(&page, &link.target, &mut cache) {
                problems.push(format!("{shown}:{}: ({}): {why}", link.line, link.target));
            }
        }
    }
    eprintln!("{checked} relative links checked");
    assert!(checked > 0, "no relative link found: is the parser broken?");
    assert!(
        problems.is_empty(),
        "{} broken relative link(s) in README.md and docs/:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_parser_finds_links_and_anchors_as_github_does() {
    let text = "# `plumb daemon`: the engine\n\
                ## 3.3 Generated configuration\n\
                ## Twice\n## Twice\n\
                ```sh\n[not](a-link.md)\n# not a heading\n```\n\
                See [a](a.md#x \"title\") and ![img](img/p.png), not `[code](c.md)`.\n\
                [ref]: ref.md#y\n\
                [web](https://example.com) [here](#local)\n";
    let found: Vec<(usize, String)> = links(text)
        .into_iter()
        .map(|l| (l.line, l.target))
        .collect();
    assert_eq!(
        found,
        [
            (9, "a.md#x".to_string()),
            (9, "img/p.png".to_string()),
            (10, "ref.md#y".to_string()),
            (11, "https://example.com".to_string()),
            (11, "#local".to_string()),
        ]
    );
    let a = anchors(text);
    for anchor in [
        "plumb-daemon-the-engine",
        "33-generated-configuration",
        "twice",
        "twice-1",
    ] {
        assert!(a.contains(anchor), "{anchor} in {a:?}");
    }
    assert!(!a.contains("not-a-heading"));
    assert_eq!(
        slug("Migrating a node from Multus (thin mode)"),
        "migrating-a-node-from-multus-thin-mode"
    );
    assert_eq!(
        slug("§5.1 kubeconfig: token expiry, thin mode"),
        "51-kubeconfig-token-expiry-thin-mode"
    );
}

#[test]
fn a_missing_file_or_heading_is_broken() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("b.md"), "# Some heading\n").unwrap();
    let page = dir.path().join("a.md");
    let mut cache = BTreeMap::new();
    assert_eq!(broken(&page, "b.md", &mut cache), None);
    assert_eq!(broken(&page, "b.md#some-heading", &mut cache), None);
    assert_eq!(broken(&page, "./", &mut cache), None);
    let missing = broken(&page, "c.md", &mut cache).unwrap();
    assert!(missing.contains("c.md does not exist"), "{missing}");
    let no_heading = broken(&page, "b.md#other", &mut cache).unwrap();
    assert!(no_heading.contains("#other"), "{no_heading}");
}
