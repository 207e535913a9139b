//! The profiler's categories of PyTorch's tensors and the tags they are: a snapshot made from a
//! profile names what each block is for, and Headroom's export names its tags the same way.

use crate::bookkeeping::tag::Tag;

/// The category PyTorch's memory profiler gives a tensor and the built-in tag it is
/// (`autograd_detail` has no tag of its own; `unknown` is `other`).
const CATEGORIES: [(&str, Tag); 7] = [
    ("parameter", Tag::WEIGHTS),
    ("gradient", Tag::GRADIENTS),
    ("activation", Tag::ACTIVATIONS),
    ("optimizer_state", Tag::OPTIMIZER_STATE),
    ("temporary", Tag::WORKSPACE),
    ("input", Tag::DATA),
    ("unknown", Tag::OTHER),
];

/// The tag of a block of `category`: the built-in kind it names, else the tag of that name
/// (Headroom's export writes a tag of its own as its category), else none.
pub(crate) fn tag_of(category: &str) -> Option<Tag> {
    CATEGORIES
        .iter()
        .find(|(name, _)| *name == category)
        .map(|&(_, tag)| tag)
        .or_else(|| Tag::named(category).ok())
}

/// The category a block of `tag` is written with: the profiler's name for a built-in kind,
/// else the tag's own name.
pub(crate) fn of_tag(tag: Tag) -> &'static str {
    CATEGORIES
        .iter()
        .find(|&&(_, t)| t == tag)
        .map_or_else(|| tag.name(), |&(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_comes_back_from_its_category() {
        let custom = Tag::named("kv_cache").unwrap();
        for tag in Tag::BUILTIN.into_iter().chain([custom]) {
            assert_eq!(tag_of(of_tag(tag)), Some(tag), "{}", tag.name());
        }
        assert_eq!(of_tag(Tag::WORKSPACE), "temporary");
    }
}
