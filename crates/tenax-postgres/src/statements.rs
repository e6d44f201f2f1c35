//! Every statement text the store sends, enumerable, so that a test can prepare each one
//! against a freshly migrated PostgreSQL (`crates/tenax/tests/it/pg_statements.rs`) before any of them runs in
//! anger.
//!
//! - A statement whose text is fixed is a constant of type [`Sql`], declared next to the code
//!   that sends it by [`statements!`], which also lists it in its module's `statements()`.
//!   Shared fragments (column lists, a common table expression) are macros that expand to
//!   literals, composed with `concat!`, so that every constant is one literal text.
//! - A statement whose text varies (a filter's conditions, a page's direction) is built by a
//!   function of its module from a [`Prefix`] declared by [`prefixes!`]; the module's
//!   `shapes()` builds every text those functions can produce from a sample of inputs (every
//!   shape, or a documented bounded sample). A declared prefix from which no listed shape is
//!   built fails the test: a builder cannot be added without its shapes.
//! - The helpers that send statements ([`super::transitions::query`] and
//!   [`super::transitions::execute`]) take a [`Text`]: an [`Sql`] or a built
//!   [`super::filter::Query`], never a bare string. The few statements sent on a
//!   `tokio_postgres::Client` of their own (the schema, the lead, the listener, the clock)
//!   send [`Sql::text`], or a [`batch`] of them.
//! - Each module's `statements()` denies `dead_code`: a module that declares statements but is
//!   missing from [`all`] does not compile. Forgetting a statement is not possible either: it
//!   is listed by the macro that declares it.
//!
//! The schema migrations (`migrations/*.sql`) are not listed: they are sent whole, in the
//! simple protocol, and every test database runs them all, which checks more than preparing.

/// A statement the store sends as it is: its name (its module and constant) and its text.
/// Made only by [`statements!`], which lists what it makes.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    name: &'static str,
    text: &'static str,
}

impl Sql {
    /// For [`declare!`] only: a constant declared any other way would not be listed.
    #[doc(hidden)]
    pub const fn declared(name: &'static str, text: &'static str) -> Self {
        Self { name, text }
    }

    pub const fn text(&self) -> &'static str {
        self.text
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// The start of statements a module builds ([`super::filter::Query::new`]): not a statement,
/// so never sent or prepared alone. Made only by [`prefixes!`], which lists what it makes.
#[derive(Debug, Clone, Copy)]
pub struct Prefix(Sql);

impl Prefix {
    /// For [`declare!`] only: a prefix declared any other way would not be listed.
    #[doc(hidden)]
    pub const fn declared(name: &'static str, text: &'static str) -> Self {
        Self(Sql::declared(name, text))
    }

    pub const fn text(&self) -> &'static str {
        self.0.text
    }

    pub const fn name(&self) -> &'static str {
        self.0.name
    }
}

/// What the helpers that send statements accept: a declared statement, or one built from a
/// declared prefix.
pub trait Text {
    fn text(&self) -> &str;
}

impl Text for Sql {
    fn text(&self) -> &str {
        self.text
    }
}

/// Declares constants of type `$type` (`NAME = text;`, with their doc comments and
/// visibility), named after their module, and the module's function `$list`, which lists them
/// all. Its list denies `dead_code`: a module missing from [`all`] does not compile.
macro_rules! declare {
    ($type:ident, $list:ident, $($(#[$doc:meta])* $vis:vis $name:ident = $text:expr;)*) => {
        $(
            $(#[$doc])*
            $vis const $name: $crate::statements::$type =
                $crate::statements::$type::declared(
                    concat!(module_path!(), "::", stringify!($name)),
                    $text,
                );
        )*

        /// What this module declares, for [`super::statements`]'s registry.
        #[deny(dead_code)]
        pub(crate) fn $list() -> Vec<$crate::statements::$type> {
            vec![$($name),*]
        }
    };
}
pub(super) use declare;

/// Declares statement constants of type [`Sql`] and the module's `statements()`, which lists
/// them ([`declare!`]). Once per module.
macro_rules! statements {
    ($($items:tt)*) => {
        $crate::statements::declare!(Sql, statements, $($items)*);
    };
}
pub(super) use statements;

/// Declares prefix constants of type [`Prefix`] and the module's `prefixes()`, which lists
/// them ([`declare!`]). Once per module; the module's `shapes()` builds every statement that
/// starts with them.
macro_rules! prefixes {
    ($($items:tt)*) => {
        $crate::statements::declare!(Prefix, prefixes, $($items)*);
    };
}
pub(super) use prefixes;

/// Statements sent as one text in the simple protocol (one round trip): each followed by `;`.
pub fn batch<'a>(statements: impl IntoIterator<Item = &'a str>) -> String {
    statements.into_iter().map(|s| format!("{s};")).collect()
}

/// What the registry calls a statement: its name without the crate's path to this store.
fn short(name: &str) -> &str {
    name.split_once("::store::postgres::")
        .map_or(name, |(_, rest)| rest)
}

/// Every statement the store can send, as (name, text): the declared constants, then every
/// shape of the built ones, named after their prefix and their shape.
pub fn all() -> Vec<(String, String)> {
    let declared = [
        super::statements(),
        activity::statements(),
        batches::statements(),
        cancel::statements(),
        catalogue::statements(),
        claims::statements(),
        clock::statements(),
        connect::statements(),
        curation::statements(),
        dependents::statements(),
        endpoints::statements(),
        facts::statements(),
        import::statements(),
        inserts::statements(),
        leases::statements(),
        limits::statements(),
        moves::statements(),
        queues::statements(),
        reads::statements(),
        schedules::statements(),
        schema::statements(),
        sealing::statements(),
        servers::statements(),
        subscriptions::statements(),
        tokens::statements(),
        transitions::statements(),
        upkeep::statements(),
        wakeups::statements(),
    ];
    let declared = declared
        .into_iter()
        .flatten()
        .map(|sql| (short(sql.name()).to_owned(), sql.text().to_owned()));
    let built = shapes().into_iter().map(|(shape, query)| {
        (
            format!("{}[{shape}]", short(query.prefix().name())),
            query.text().to_owned(),
        )
    });
    declared.chain(built).collect()
}

/// Every shape of every built statement, as (shape, statement).
fn shapes() -> Vec<(String, Query)> {
    [
        cancel::shapes(),
        curation::shapes(),
        reads::shapes(),
        servers::shapes(),
        wakeups::shapes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Every declared prefix, with how many shapes of [`all`] were built from it.
pub fn all_prefixes() -> Vec<(String, usize)> {
    let built = shapes();
    [
        cancel::prefixes(),
        curation::prefixes(),
        reads::prefixes(),
        servers::prefixes(),
        wakeups::prefixes(),
    ]
    .into_iter()
    .flatten()
    .map(|prefix| {
        let uses = built
            .iter()
            .filter(|(_, query)| query.prefix().name() == prefix.name())
            .count();
        (short(prefix.name()).to_owned(), uses)
    })
    .collect()
}

use super::filter::Query;
use super::{
    activity, batches, cancel, catalogue, claims, clock, connect, curation, dependents, endpoints,
    facts, import, inserts, leases, limits, moves, queues, reads, schedules, schema, sealing,
    servers, subscriptions, tokens, transitions, upkeep, wakeups,
};
