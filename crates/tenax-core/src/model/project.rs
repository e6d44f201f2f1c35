//! Which Zaqar project a queue belongs to, and how a project id is written in a queue name.
//!
//! Invariants:
//! - The Zaqar queue `q` of project `p` is one Tenax queue, and its project is recoverable
//!   from its name alone, on either API: a native request that names it touches project `p`'s
//!   queue, and a token scoped to projects is held to them there too. A queue whose name holds
//!   no project is in none.
//! - A *plain* project id (1 to [`MAX_PLAIN_PROJECT`] ASCII letters, digits, `_`, `-`, `.`:
//!   every id Tenax accepted before any other was) is written as it is: the queue is `p:q`,
//!   exactly as before, so existing data keeps its names.
//! - Any other id (Zaqar accepts any characters, up to 256) is *escaped*: the queue is
//!   `:e:q`, where `e` keeps ASCII letters, digits, `_` and `-` and writes every other byte of
//!   the id's UTF-8 as `.` and two lowercase hex digits (`JAM Project` → `:JAM.20Project:q`).
//!   No plain id is empty, so no plain queue name starts with `:`, and the two forms never
//!   meet. The escape is canonical (one spelling per id) and only ids that are not plain are
//!   escaped, so every project has exactly one queue name per Zaqar queue name.
//! - Neither form's project part contains `:`, and Zaqar queue names contain none, so the
//!   queue name after the project is what follows the project's last `:`.

use std::borrow::Cow;

/// The separator of project and queue in a Tenax queue name.
pub const SEPARATOR: char = ':';

/// The longest plain project id: with `:` and Zaqar's longest queue name (64), the native
/// API's longest queue name before escaped ids (256).
pub const MAX_PLAIN_PROJECT: usize = 191;

/// Zaqar's longest project id, in characters. Zaqar reads header values as Latin-1 (one
/// character per byte, as WSGI does), so each is at most two bytes of UTF-8.
pub const MAX_PROJECT: usize = 256;

/// The longest escaped project part of a queue name: every byte of the longest id escaped.
pub const MAX_ESCAPED_PROJECT: usize = 3 * 2 * MAX_PROJECT;

/// Whether `project` is written as it is in queue names.
pub fn is_plain(project: &str) -> bool {
    !project.is_empty()
        && project.len() <= MAX_PLAIN_PROJECT
        && project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

fn is_kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_-".contains(&b)
}

/// The queue `name` of `project`: `p:name`, or `:e:name` for a project that is not plain.
pub fn queue_of(project: &str, name: &str) -> String {
    if is_plain(project) {
        return format!("{project}{SEPARATOR}{name}");
    }
    let mut out = String::with_capacity(project.len() * 3 + name.len() + 2);
    out.push(SEPARATOR);
    for b in project.bytes() {
        if is_kept(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!(".{b:02x}"));
        }
    }
    out.push(SEPARATOR);
    out.push_str(name);
    out
}

/// The project of an escaped project part, if `escaped` is the canonical escape of an id that
/// is not plain.
fn unescape(escaped: &str) -> Option<String> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'.' => {
                let hex = escaped.get(i + 1..i + 3)?;
                if !hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                {
                    return None;
                }
                let byte = u8::from_str_radix(hex, 16).ok()?;
                if is_kept(byte) {
                    return None;
                }
                out.push(byte);
                i += 3;
            }
            b if is_kept(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    let project = String::from_utf8(out).ok()?;
    (!is_plain(&project) && !project.is_empty()).then_some(project)
}

/// The project `queue` belongs to and the rest of its name (the Zaqar queue name, for a Zaqar
/// queue), if it is in one.
pub fn split(queue: &str) -> Option<(Cow<'_, str>, &str)> {
    if let Some(escaped) = queue.strip_prefix(SEPARATOR) {
        if let Some((part, rest)) = escaped.split_once(SEPARATOR)
            && let Some(project) = unescape(part)
        {
            return Some((Cow::Owned(project), rest));
        }
    }
    // A plain project, or a name that only looks escaped: before the first `:`, as always.
    queue
        .split_once(SEPARATOR)
        .map(|(project, rest)| (Cow::Borrowed(project), rest))
}

/// The project `queue` belongs to, if any.
pub fn project_of(queue: &str) -> Option<Cow<'_, str>> {
    split(queue).map(|(project, _)| project)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_project_is_before_the_first_colon() {
        assert_eq!(project_of("p1:orders").as_deref(), Some("p1"));
        assert_eq!(project_of("p1:a:b").as_deref(), Some("p1"));
        assert_eq!(project_of(":orders").as_deref(), Some(""));
        assert_eq!(project_of("orders"), None);
        assert_eq!(queue_of("p1", "orders"), "p1:orders");
        assert_eq!(
            queue_of(&"p".repeat(191), "q"),
            format!("{}:q", "p".repeat(191))
        );
    }

    #[test]
    fn other_projects_are_escaped_and_come_back() {
        for project in [
            "JAM Project",
            "a:b",
            "café",
            "a b",
            "x.y z",
            "~!@#$%^&*()",
            &"p".repeat(192),
            &"é".repeat(128),
        ] {
            let queue = queue_of(project, "orders");
            assert!(queue.starts_with(':'), "{queue}");
            assert!(
                queue
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b)),
                "{queue}"
            );
            let (back, name) = split(&queue).unwrap();
            assert_eq!((back.as_ref(), name), (project, "orders"));
        }
        assert_eq!(queue_of("JAM Project", "q"), ":JAM.20Project:q");
        assert_eq!(
            queue_of(&"\u{ff}".repeat(MAX_PROJECT), "q").len(),
            MAX_ESCAPED_PROJECT + 3
        );
    }

    #[test]
    fn names_that_only_look_escaped_keep_their_old_project() {
        // Not canonical: a kept byte escaped, upper-case hex, a plain id escaped, bad UTF-8.
        for queue in [":.61:q", ":.2E:q", ":abc:q", ":.ff:q", ":.2:q", ":a.2:q"] {
            assert_eq!(project_of(queue).as_deref(), Some(""), "{queue}");
        }
    }
}
