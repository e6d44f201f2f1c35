//! Which Zaqar project a queue belongs to.
//!
//! Invariant: the Zaqar queue `q` of project `p` is the Tenax queue `p:q`, and neither a project
//! id nor a Zaqar queue name contains `:`. So a queue's project is what comes before its first
//! `:`, on either API: a native request that names `p:q` touches project `p`'s queue, and a
//! token scoped to projects is held to them there too. A queue without `:` is in no project.

/// The separator of project and queue in a Tenax queue name.
pub const SEPARATOR: char = ':';

/// The project `queue` belongs to, if any.
pub fn project_of(queue: &str) -> Option<&str> {
    queue.split_once(SEPARATOR).map(|(project, _)| project)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_in_the_project_before_its_first_colon() {
        assert_eq!(project_of("p1:orders"), Some("p1"));
        assert_eq!(project_of("p1:a:b"), Some("p1"));
        assert_eq!(project_of(":orders"), Some(""));
        assert_eq!(project_of("orders"), None);
    }
}
