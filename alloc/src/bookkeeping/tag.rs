//! Tags say what an allocation holds, so that an OOM report can say what the memory is held by.
//!
//! Finding a tag by name can fail (the table of names is bounded), so [`Tag::named`] and reading a
//! tag back from its name live above the error type, in `tag_naming`.

use parking_lot::Mutex;
use serde::{Serialize, Serializer};

/// What an allocation holds: weights, gradients, activations, ... or a user-named kind.
///
/// A `Tag` is a small `Copy` value. The built-in tags are constants; [`Tag::named`] interns any
/// other name process-wide, so the same name always yields the same tag.
///
/// ```
/// use headroom_alloc::Tag;
/// let kv = Tag::named("kv-cache").unwrap();
/// assert_eq!(kv, Tag::named("kv-cache").unwrap());
/// assert_eq!(kv.name(), "kv-cache");
/// assert_eq!(Tag::named("weights").unwrap(), Tag::WEIGHTS);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u16);

const BUILTIN_NAMES: [&str; 7] = [
    "weights",
    "gradients",
    "activations",
    "optimizer_state",
    "workspace",
    "data",
    "other",
];

/// Named tags past the built-ins; bounded so that per-tag tables stay small.
pub(crate) const MAX_NAMED: usize = 4096;

/// The process-wide table of named tags; index `i` is tag `BUILTIN_NAMES.len() + i`.
static NAMED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The width of a table's column of tag names: the longest of `tags`, and at least 16.
pub(crate) fn name_width(tags: impl Iterator<Item = Tag>) -> usize {
    tags.map(|tag| tag.name().len()).max().unwrap_or(0).max(16)
}

impl Tag {
    /// Model parameters.
    pub const WEIGHTS: Tag = Tag(0);
    /// Gradients of the parameters.
    pub const GRADIENTS: Tag = Tag(1);
    /// Activations saved for the backward pass.
    pub const ACTIVATIONS: Tag = Tag(2);
    /// Optimizer state (momenta, second moments).
    pub const OPTIMIZER_STATE: Tag = Tag(3);
    /// Scratch space of kernels.
    pub const WORKSPACE: Tag = Tag(4);
    /// Input batches and labels.
    pub const DATA: Tag = Tag(5);
    /// Anything else.
    pub const OTHER: Tag = Tag(6);

    /// The built-in tags, in index order.
    pub const BUILTIN: [Tag; 7] = [
        Tag::WEIGHTS,
        Tag::GRADIENTS,
        Tag::ACTIVATIONS,
        Tag::OPTIMIZER_STATE,
        Tag::WORKSPACE,
        Tag::DATA,
        Tag::OTHER,
    ];

    /// The tag's name.
    pub fn name(self) -> &'static str {
        let index = usize::from(self.0);
        match BUILTIN_NAMES.get(index) {
            Some(name) => name,
            // A `Tag` past the built-ins can only be made by `Tag::named`, which interned it.
            None => NAMED.lock()[index - BUILTIN_NAMES.len()],
        }
    }

    /// A dense index (built-ins first), for per-tag tables.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The activations of one kind of layer (`attention`, `mlp`, `norm`, ...): the tag named
    /// `activations/<kind>`, which [`Tag::is_activations`] counts as activations, so that a
    /// report can say which layers hold them. Plain [`Tag::ACTIVATIONS`] once the table of
    /// names is full.
    ///
    /// ```
    /// use headroom_alloc::Tag;
    /// let attention = Tag::activations_of("attention");
    /// assert_eq!(attention.name(), "activations/attention");
    /// assert!(attention.is_activations() && Tag::ACTIVATIONS.is_activations());
    /// assert!(!Tag::GRADIENTS.is_activations());
    /// ```
    pub fn activations_of(kind: &str) -> Tag {
        intern(&format!("{}/{kind}", BUILTIN_NAMES[2])).unwrap_or(Tag::ACTIVATIONS)
    }

    /// True for [`Tag::ACTIVATIONS`] and the tags of [`Tag::activations_of`].
    pub fn is_activations(self) -> bool {
        self == Tag::ACTIVATIONS
            || (self.index() >= BUILTIN_NAMES.len() && self.name().starts_with("activations/"))
    }
}

/// The tag named `name`: the built-in one if the name is built in, otherwise the name interned
/// process-wide (the same name always yields the same tag). `None` when [`MAX_NAMED`] custom
/// names are already interned and `name` is not one of them.
pub(crate) fn intern(name: &str) -> Option<Tag> {
    if let Some(index) = BUILTIN_NAMES.iter().position(|&n| n == name) {
        return Some(Tag(index as u16));
    }
    let mut named = NAMED.lock();
    if let Some(index) = named.iter().position(|&n| n == name) {
        return Some(Tag((BUILTIN_NAMES.len() + index) as u16));
    }
    if named.len() >= MAX_NAMED {
        return None;
    }
    // Leaked on purpose: tag names live for the whole process, like `tracing` metadata.
    named.push(Box::leak(name.to_owned().into_boxed_str()));
    Some(Tag((BUILTIN_NAMES.len() + named.len() - 1) as u16))
}

impl Default for Tag {
    fn default() -> Self {
        Tag::OTHER
    }
}

impl std::fmt::Debug for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tag({})", self.name())
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Tag {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}
