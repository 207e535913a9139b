//! Which tokens of a rendered conversation are scored: the spans of the assistant's turns,
//! from the template's `{% generation %}` blocks or, for a template without them, by rendering
//! the conversation's beginnings; then every token that overlaps a span, as transformers
//! computes `return_assistant_tokens_mask`.

use std::ops::Range;

use super::render::{Rendered, Renderer};

/// The tokens whose byte ranges (`offsets`, in order) overlap one of `spans` (in order), as
/// transformers masks the assistant's tokens.
pub fn overlapping(offsets: &[(usize, usize)], spans: &[Range<usize>]) -> Vec<bool> {
    let mut mask = vec![false; offsets.len()];
    let mut span = 0;
    for (at, &(start, end)) in offsets.iter().enumerate() {
        while span < spans.len() && start >= spans[span].end {
            span += 1;
        }
        if span == spans.len() {
            break;
        }
        mask[at] = end > spans[span].start;
    }
    mask
}

/// The assistant's spans of `whole` (`messages` rendered), found by rendering the
/// conversation before each assistant turn with the generation prompt and through it without:
/// the turn is what the second adds to the first, up to and with the last of `ends` (the
/// end-of-turn tokens) it holds. A template that renders a beginning otherwise than the whole
/// (one that rewrites earlier turns) is an error: such a template needs `{% generation %}`
/// blocks.
pub fn assistant_spans(
    renderer: &Renderer,
    messages: &[serde_json::Value],
    whole: &Rendered,
    ends: &[String],
) -> Result<Vec<Range<usize>>, String> {
    let mut spans = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        let before = renderer
            .render(&messages[..at], true)
            .map_err(|err| err.to_string())?;
        let through = renderer
            .render(&messages[..=at], false)
            .map_err(|err| err.to_string())?;
        if !through.text.starts_with(&before.text) || !whole.text.starts_with(&through.text) {
            return Err(format!(
                "the chat template renders the conversation up to message {at} otherwise than \
                 as the beginning of the whole, so the assistant's tokens cannot be found by \
                 rendering its beginnings: give a template with {{% generation %}} blocks \
                 (--chat-template)"
            ));
        }
        let turn = &through.text[before.text.len()..];
        let end = ends
            .iter()
            .filter_map(|end| turn.rfind(end.as_str()).map(|at| at + end.len()))
            .max()
            .unwrap_or(turn.len());
        spans.push(before.text.len()..before.text.len() + end);
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_overlapping_a_span_are_masked_as_transformers_masks_them() {
        // Tokens: "ab" "c" "de" "f"; spans cover "c" and half of "de"..., then "f".
        let offsets = [(0, 2), (2, 3), (3, 5), (5, 6)];
        let middle: Vec<Range<usize>> = std::iter::once(2..4).collect();
        assert_eq!(overlapping(&offsets, &middle), [false, true, true, false]);
        assert_eq!(
            overlapping(&offsets, &[1..2, 5..6]),
            [true, false, false, true]
        );
        assert_eq!(overlapping(&offsets, &[]), [false; 4]);
    }
}
