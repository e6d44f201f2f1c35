//! The queues and Zaqar projects a token may touch: lists of patterns in which `*` stands for
//! any run of characters (`billing.*`, `team-a:*`). A token without a list may touch all.

use std::sync::Arc;

use super::role::{Capability, Role};

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
#[derive(Debug, Clone)]
pub struct Principal {
    /// The token's id; `None` when authentication is off or for the `--admin-token`.
    pub token: Option<u64>,
    pub name: Arc<str>,
    pub role: Role,
    pub queues: Scope,
    pub projects: Scope,
}

impl Principal {
    /// Everyone, when authentication is off.
    pub fn anyone() -> Self {
        Self {
            token: None,
            name: Arc::from("anyone (authentication is off)"),
            role: Role::Admin,
            queues: Scope::all(),
            projects: Scope::all(),
        }
    }

    pub fn may(&self, capability: Capability) -> bool {
        // Tokens and metrics are about every queue: only a token that is not scoped may.
        self.role.grants(capability)
            && (!matches!(capability, Capability::Tokens | Capability::Metrics)
                || (self.queues.is_all() && self.projects.is_all()))
    }

    /// Whether the token is limited to some queues or projects.
    pub fn is_scoped(&self) -> bool {
        !(self.queues.is_all() && self.projects.is_all())
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

    #[test]
    fn token_administration_needs_an_unscoped_admin() {
        let mut admin = Principal::anyone();
        assert!(admin.may(Capability::Tokens));
        admin.queues = Scope::of(&["a".into()]);
        assert!(!admin.may(Capability::Tokens));
        assert!(admin.may(Capability::Manage));
    }
}
