//! Identities: task ids, the scope a task belongs to, and the principal that created it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A task id: a 48-bit millisecond wall-clock prefix and 80 random bits, written as 32
/// lowercase hex digits.
///
/// Task ids may act as bearer capabilities on the wire, so the 80 bits come from the
/// operating system's CSPRNG: guessing one live id takes on the order of 2^80 tries for
/// every millisecond's worth of tasks, far beyond the 64 bits session identifiers are held
/// to. The prefix reveals only the creation time, which everyone who holds the id can read
/// from the task itself. It makes ids created close together sort close together, so a
/// store's ordered tables take new tasks at the edge of their key space instead of
/// rewriting a random page per task (a redb commit writes each page it touched, and a
/// PostgreSQL B-tree dirties a page per insert). Nothing relies on the order for
/// correctness: clocks may step, and ids of any layout (older stores' fully random ones
/// among them) parse and work the same. The hex alphabet is header-safe, so the id travels
/// in `Mcp-Name` without the base64 escape form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId([u8; 16]);

/// The bytes of an id's time prefix.
const TIME_PREFIX: usize = 6;

impl TaskId {
    /// A fresh id, stamped with the current wall-clock time.
    ///
    /// # Panics
    /// If the operating system has no randomness source; nothing safe can be done without one.
    pub fn generate() -> Self {
        Self::generate_at(super::time::wall_millis())
    }

    /// A fresh id whose time prefix is `ms` (milliseconds since the Unix epoch, taken
    /// modulo 2^48, which wraps in the year 10889).
    ///
    /// # Panics
    /// As [`TaskId::generate`].
    pub(crate) fn generate_at(ms: u64) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..TIME_PREFIX].copy_from_slice(&ms.to_be_bytes()[8 - TIME_PREFIX..]);
        crate::ids::fill_random(&mut bytes[TIME_PREFIX..]);
        Self(bytes)
    }

    /// Parses the wire form. Anything that is not exactly 32 lowercase hex digits is `None`,
    /// which callers report exactly like an unknown id.
    pub fn parse(s: &str) -> Option<Self> {
        crate::ids::unhex_array(s).map(Self)
    }

    /// The raw bytes, used as a fixed-width storage key.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The id from its raw storage bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

impl TaskId {
    /// The 32 hex digits, written without the formatting machinery: every reply that names
    /// a task writes its id.
    pub(crate) fn hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        crate::ids::hex_into(&self.0, &mut out);
        out
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hex = self.hex();
        s.serialize_str(std::str::from_utf8(&hex).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read in place where the input allows it: a stored record names its task, and
        // every lookup decodes one.
        struct Id;
        impl serde::de::Visitor<'_> for Id {
            type Value = TaskId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a task id: 32 lowercase hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TaskId, E> {
                TaskId::parse(s).ok_or_else(|| E::custom("a task id is 32 lowercase hex digits"))
            }
        }
        d.deserialize_str(Id)
    }
}

/// The isolation boundary a task lives in. A request can only reach tasks of its own scope;
/// a task of another scope is reported exactly like an unknown one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scope(String);

impl Scope {
    /// The scope named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The scope's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tenant whose scope this is.
    pub fn tenant(&self) -> &str {
        self.0
            .split_once(SCOPE_SEPARATOR)
            .map_or(self.0.as_str(), |(tenant, _)| tenant)
    }

    /// The subject, for a per-subject scope.
    pub fn subject(&self) -> Option<&str> {
        self.0
            .split_once(SCOPE_SEPARATOR)
            .map(|(_, subject)| subject)
    }

    /// A principal whose scope this is: who an operator acts as on one of its tasks.
    pub fn owner(&self) -> Principal {
        match self.subject() {
            Some(subject) => {
                Principal::new(self.tenant(), subject).isolated(Isolation::TenantSubject)
            }
            None => Principal::new(self.tenant(), "operator"),
        }
    }
}

/// The stable identity a request was authenticated as: never a credential, only who.
///
/// The tenant names the budgets a request draws on; the store scope its tasks live in is
/// the tenant, or the tenant and the subject when the server keeps subjects apart
/// ([`Isolation::TenantSubject`]). The subject is recorded with the work for audit and for
/// tools that act on someone's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The tenant.
    pub tenant: String,
    /// Who inside the tenant.
    pub subject: String,
    /// How far this principal's tasks are kept apart from others'.
    #[serde(default, skip_serializing_if = "Isolation::is_tenant")]
    pub isolation: Isolation,
}

/// What a task is kept apart by: who may find it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Every principal of the tenant reaches the tenant's tasks.
    #[default]
    Tenant,
    /// Only the subject that created a task reaches it; a colleague's is not found.
    TenantSubject,
}

impl Isolation {
    fn is_tenant(&self) -> bool {
        *self == Isolation::Tenant
    }
}

/// Separates the tenant from the subject in a per-subject scope's name. A control
/// character, which tenants and subjects never contain (the edge refuses them), so no two
/// pairs share a name.
const SCOPE_SEPARATOR: char = '\u{1f}';

impl Principal {
    /// A principal whose tasks are the tenant's.
    pub fn new(tenant: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            subject: subject.into(),
            isolation: Isolation::Tenant,
        }
    }

    /// This principal, its tasks kept apart by `isolation`.
    pub fn isolated(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// The store scope this principal's tasks live in.
    pub fn scope(&self) -> Scope {
        match self.isolation {
            Isolation::Tenant => Scope::new(self.tenant.clone()),
            Isolation::TenantSubject => {
                Scope::new(format!("{}{SCOPE_SEPARATOR}{}", self.tenant, self.subject))
            }
        }
    }

    /// Whether `scope` is this principal's (without building its name).
    pub fn owns(&self, scope: &Scope) -> bool {
        let s = scope.as_str();
        match self.isolation {
            Isolation::Tenant => s == self.tenant,
            Isolation::TenantSubject => s
                .strip_prefix(self.tenant.as_str())
                .and_then(|rest| rest.strip_prefix(SCOPE_SEPARATOR))
                .is_some_and(|subject| subject == self.subject),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_subject_scope_is_its_subjects_alone() {
        let ada = Principal::new("acme", "ada").isolated(Isolation::TenantSubject);
        let bob = Principal::new("acme", "bob").isolated(Isolation::TenantSubject);
        let team = Principal::new("acme", "ada");
        assert!(ada.owns(&ada.scope()));
        assert!(!ada.owns(&bob.scope()));
        assert!(!bob.owns(&ada.scope()));
        assert!(
            !ada.owns(&team.scope()),
            "the tenant's shared scope is not ada's own"
        );
        assert!(!team.owns(&ada.scope()));
        assert!(team.owns(&Principal::new("acme", "bob").scope()));
        // A tenant that is a prefix of another is not its owner.
        let short = Principal::new("ac", "me\u{1f}ada").isolated(Isolation::TenantSubject);
        assert!(!short.owns(&Principal::new("acme", "x").scope()));
        assert_eq!(ada.scope().tenant(), "acme");
        assert_eq!(ada.scope().subject(), Some("ada"));
        assert_eq!(team.scope().subject(), None);
        assert!(ada.owns(&ada.scope().owner().scope()));
        assert!(team.owns(&team.scope().owner().scope()));
        assert_eq!(
            serde_json::to_value(&team).unwrap_or_default(),
            serde_json::json!({"tenant": "acme", "subject": "ada"}),
            "a tenant-isolated principal is stored as before"
        );
    }

    #[test]
    fn ids_round_trip_and_are_distinct() {
        let a = TaskId::generate();
        let b = TaskId::generate();
        assert_ne!(a, b);
        let s = a.to_string();
        assert_eq!(s.len(), 32);
        assert!(
            s.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(TaskId::parse(&s), Some(a));
        let json = serde_json::to_string(&a).unwrap_or_default();
        assert_eq!(json, format!("\"{s}\""));
        // Any 32 hex digits are an id, whatever made them (older builds drew all 128 bits
        // at random).
        let known = "00ff10a0123456789abcdef0fedcba98";
        assert_eq!(
            TaskId::parse(known).map(|id| id.to_string()).as_deref(),
            Some(known)
        );
    }

    #[test]
    fn ids_lead_with_their_millisecond_and_keep_80_random_bits() {
        let t = 0x0123_4567_89ab_u64;
        let a = TaskId::generate_at(t);
        let b = TaskId::generate_at(t);
        assert_eq!(&a.to_string()[..12], "0123456789ab");
        assert_eq!(&a.as_bytes()[..6], &b.as_bytes()[..6]);
        // Same millisecond: the random part alone tells them apart.
        assert_ne!(a.as_bytes()[6..], b.as_bytes()[6..]);
        // A later millisecond sorts after every id of an earlier one.
        let later = TaskId::generate_at(t + 1);
        assert!(later > a && later > b);
        // The prefix keeps the low 48 bits of the time.
        let wrapped = TaskId::generate_at((1 << 48) | 7);
        assert_eq!(&wrapped.as_bytes()[..6], &[0, 0, 0, 0, 0, 7]);
        // The wall clock drives `generate`: an id made now sorts after one stamped in 2020.
        let old = TaskId::generate_at(1_577_836_800_000);
        assert!(TaskId::generate() > old);
    }

    #[test]
    fn malformed_ids_do_not_parse() {
        for bad in [
            "",
            "tasks-conformance-nonexistent-12345",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789abcdef0123456789abcdeg",
            "é123456789abcdef0123456789abcde",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad:?}");
        }
    }
}
