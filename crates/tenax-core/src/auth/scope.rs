//! The queues and Zaqar projects a token may touch: lists of patterns in which `*` stands for
//! any run of characters (`billing.*`, `team-a:*`). A token without a list may touch all.

use std::sync::Arc;

use super::role::{Capability, Role};
use crate::model::project::project_of;

/// Patterns a name must match one of; `None`: every name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub patterns: Option<Vec<String>>,
}

impl Scope {
    pub fn all() -> Self {
        Self { patterns: None }
    }

    pub fn of(patterns: &[String]) -> Self {
        if patterns.is_empty() {
            Self::all()
        } else {
            Self {
                patterns: Some(patterns.to_vec()),
            }
        }
    }

    /// Whether the scope admits `name`.
    pub fn admits(&self, name: &str) -> bool {
        self.patterns
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| glob(p, name)))
    }

    /// Whether the scope admits every name.
    pub fn is_all(&self) -> bool {
        self.patterns.is_none()
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (also none).
pub fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name must be the pattern.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Who is asking: a token's role and scopes (or everyone, when authentication is off).
///
/// Invariant: whether a queue is within the token's reach is decided by [`Principal::admits_queue`]
/// alone, which holds a queue to both scopes: the queue patterns, and the projects (a queue's
/// project is what precedes its first `:`, on either API: [`crate::model::project`]). The scopes
/// are private so that no caller can check one and forget the other.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The token's id; `None` when authentication is off or for the `--admin-token`.
    pub token: Option<u64>,
    pub name: Arc<str>,
    pub role: Role,
    queues: Scope,
    projects: Scope,
}

impl Principal {
    pub fn new(
        token: Option<u64>,
        name: Arc<str>,
        role: Role,
        queues: Scope,
        projects: Scope,
    ) -> Self {
        Self {
            token,
            name,
            role,
            queues,
            projects,
        }
    }

    /// Everyone, when authentication is off.
    pub fn anyone() -> Self {
        Self::new(
            None,
            Arc::from("anyone (authentication is off)"),
            Role::Admin,
            Scope::all(),
            Scope::all(),
        )
    }

    pub fn may(&self, capability: Capability) -> bool {
        // Tokens, metrics, backups and pools are about every queue: only a token that is not
        // scoped may.
        self.role.grants(capability)
            && (!matches!(
                capability,
                Capability::Tokens | Capability::Metrics | Capability::Backup | Capability::Pools
            ) || !self.is_scoped())
    }

    /// Whether the token is limited to some queues or projects.
    pub fn is_scoped(&self) -> bool {
        !(self.queues.is_all() && self.projects.is_all())
    }

    /// Whether the token may touch `queue`: its queue patterns admit it and, for a token
    /// scoped to projects, it is a queue of one of them (`project:name`). A queue in no project
    /// is out of reach of a token scoped to projects.
    pub fn admits_queue(&self, queue: &str) -> bool {
        self.queues.admits(queue)
            && (self.projects.is_all()
                || project_of(queue).is_some_and(|project| self.projects.admits(&project)))
    }

    /// Whether the token may act for the Zaqar project `project`.
    pub fn admits_project(&self, project: &str) -> bool {
        self.projects.admits(project)
    }

    /// Why the token may not touch `queue`, in words, for a 403.
    pub fn refusal(&self, queue: &str) -> String {
        if self.queues.admits(queue) {
            match project_of(queue) {
                Some(project) => format!(
                    "this token ({}) may not touch queue {queue:?}: it is in project \
                     {project:?}, and the token is scoped to other projects",
                    self.name
                ),
                None => format!(
                    "this token ({}) may not touch queue {queue:?}: the token is scoped to \
                     projects, and the queue is in none (a project's queues are named \
                     `project:queue`)",
                    self.name
                ),
            }
        } else {
            format!("this token ({}) may not touch queue {queue:?}", self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_with_stars() {
        for (pattern, name, want) in [
            ("emails", "emails", true),
            ("emails", "emails2", false),
            ("billing.*", "billing.invoices", true),
            ("billing.*", "billing.", true),
            ("billing.*", "billing", false),
            ("*", "anything", true),
            ("team-a:*", "team-a:q", true),
            ("team-a:*", "team-b:q", false),
            ("*.dead", "x.dead", true),
            ("a*b*c", "a-b-c", true),
            ("a*b*c", "a-c-b", false),
            ("a*a", "a", false),
            ("*x*", "yxy", true),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} {name}");
        }
        let scope = Scope::of(&["a".into(), "b.*".into()]);
        assert!(scope.admits("a") && scope.admits("b.c") && !scope.admits("c"));
        assert!(Scope::of(&[]).admits("anything"));
    }

    fn scoped(queues: &[&str], projects: &[&str]) -> Principal {
        let list = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        Principal::new(
            Some(1),
            Arc::from("t"),
            Role::Admin,
            Scope::of(&list(queues)),
            Scope::of(&list(projects)),
        )
    }

    #[test]
    fn token_administration_needs_an_unscoped_admin() {
        assert!(Principal::anyone().may(Capability::Tokens));
        for admin in [scoped(&["a"], &[]), scoped(&[], &["p1"])] {
            assert!(!admin.may(Capability::Tokens));
            assert!(!admin.may(Capability::Metrics));
            assert!(!admin.may(Capability::Backup));
            assert!(admin.may(Capability::Manage));
        }
    }

    #[test]
    fn a_project_scope_binds_native_queue_names_too() {
        let p1 = scoped(&[], &["p1"]);
        assert!(p1.admits_queue("p1:orders"));
        assert!(!p1.admits_queue("p2:orders"));
        assert!(!p1.admits_queue("orders"), "a queue in no project");
        assert!(!p1.admits_queue("p1"), "no separator: not p1's");
        assert!(!p1.admits_queue("p1x:orders"));
        assert!(p1.refusal("p2:orders").contains("project \"p2\""));
        let both = scoped(&["*:mail"], &["p1", "p3"]);
        assert!(both.admits_queue("p1:mail") && both.admits_queue("p3:mail"));
        assert!(!both.admits_queue("p1:orders") && !both.admits_queue("p2:mail"));
        let queues_only = scoped(&["team-a.*"], &[]);
        assert!(queues_only.admits_queue("team-a.x") && !queues_only.admits_queue("p1:x"));
        assert!(Principal::anyone().admits_queue("anything:at-all"));
    }
}
