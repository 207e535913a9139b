//! Tags from names: [`Tag::named`], which fails once the table of names is full, and reading a
//! tag back from its name.

use serde::{Deserialize, Deserializer};

use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::tag::{MAX_NAMED, Tag, intern};

impl Tag {
    /// The tag with this name: a built-in one if the name is built in, otherwise an interned one.
    ///
    /// Fails only when more than 4096 distinct custom names have been interned in this process.
    pub fn named(name: &str) -> Result<Tag> {
        intern(name).ok_or(Error::TooManyTags { max: MAX_NAMED })
    }
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Tag::named(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_round_trip() {
        for tag in Tag::BUILTIN {
            assert_eq!(Tag::named(tag.name()).unwrap(), tag);
        }
        assert_eq!(Tag::default(), Tag::OTHER);
    }

    #[test]
    fn named_tags_are_interned_and_serialize_by_name() {
        let a = Tag::named("tag-test-a").unwrap();
        let b = Tag::named("tag-test-b").unwrap();
        assert_ne!(a, b);
        assert!(a.index() >= Tag::BUILTIN.len());
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "\"tag-test-a\"");
        let back: Tag = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
    }
}
