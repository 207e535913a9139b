//! The integer codes of ops that a kernel family's `.cu` source numbers in a C `enum`
//! (`enum Unary { U_NEG, U_RELU, ... };` in `elementwise.cu`), read out of that source when the
//! crate compiles. The `.cu` file is the one place the codes are written: the Rust side declares
//! a constant per enumerator it sends ([`enum_codes!`]), and an enumerator the enum lacks fails
//! the build (`cargo check` too).
//!
//! The enums read this way list bare enumerators, separated by commas: an initializer
//! (`U_NEG = 3`) or a comment inside the braces fails the build too, rather than being misread.

/// Declares `const NAME: i32` for each `NAME` listed: the code of enumerator `NAME` of enum
/// `enumeration` in `family`'s `.cu` source ([`enum_code`]), read when the crate compiles.
///
/// ```ignore
/// enum_codes!(Family::Reduce, "Reduce": R_SUM, R_MEAN);
/// ```
macro_rules! enum_codes {
    ($family:expr, $enumeration:literal: $($name:ident),+ $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` of `enum ", $enumeration, "`, read from the source.")]
            const $name: i32 =
                $crate::cuda::enum_codes::enum_code($family.body(), $enumeration, stringify!($name));
        )+
    };
}

pub(crate) use enum_codes;

/// The value of enumerator `name` of `enum enumeration { A, B, ... }` in the CUDA C `source`: its
/// position in the list. Panics (in a constant: fails the build) when the enum or the
/// enumerator is missing, or the list holds anything but bare enumerators.
pub(crate) const fn enum_code(source: &str, enumeration: &str, name: &str) -> i32 {
    let (s, name) = (source.as_bytes(), name.as_bytes());
    let mut at = list_start(s, enumeration.as_bytes());
    let mut code = 0;
    loop {
        let (start, end, next) = enumerator(s, at);
        if end - start == name.len() && matches_at(s, start, name) {
            return code;
        }
        match next {
            Some(next) => at = next,
            None => panic!("the CUDA enum has no such enumerator"),
        }
        code += 1;
    }
}

/// The number of enumerators of `enum enumeration { ... }` in the CUDA C `source`, read as
/// [`enum_code`] reads them: for tests that every enumerator is some op's code.
#[cfg(test)]
pub(crate) const fn enum_len(source: &str, enumeration: &str) -> usize {
    let s = source.as_bytes();
    let mut at = list_start(s, enumeration.as_bytes());
    let mut len = 1;
    while let (_, _, Some(next)) = enumerator(s, at) {
        at = next;
        len += 1;
    }
    len
}

/// Where the enumerators of `enum name {` begin in `s`, outside comments: just after the brace.
const fn list_start(s: &[u8], name: &[u8]) -> usize {
    let mut at = 0;
    while at < s.len() {
        if matches_at(s, at, b"//") {
            while at < s.len() && s[at] != b'\n' {
                at += 1;
            }
        } else if matches_at(s, at, b"/*") {
            at += 2;
            while at < s.len() && !matches_at(s, at, b"*/") {
                at += 1;
            }
        } else if matches_word_at(s, at, b"enum") {
            let named = skip_space(s, at + 4);
            if named > at + 4 && matches_word_at(s, named, name) {
                let brace = skip_space(s, named + name.len());
                if brace < s.len() && s[brace] == b'{' {
                    return brace + 1;
                }
            }
        }
        at += 1;
    }
    panic!("the CUDA source has no such enum")
}

/// The enumerator at `at` in an enum's list: where its name starts and ends, and where the next
/// one starts (`None` after the last).
const fn enumerator(s: &[u8], at: usize) -> (usize, usize, Option<usize>) {
    let start = skip_space(s, at);
    let mut end = start;
    while end < s.len() && is_identifier(s[end]) {
        end += 1;
    }
    if end == start {
        panic!("a CUDA enum read for op codes holds something other than an enumerator");
    }
    let after = skip_space(s, end);
    if after < s.len() && s[after] == b',' {
        // A trailing comma ends the list too.
        let next = skip_space(s, after + 1);
        if next < s.len() && s[next] == b'}' {
            return (start, end, None);
        }
        return (start, end, Some(after + 1));
    }
    if after < s.len() && s[after] == b'}' {
        return (start, end, None);
    }
    panic!("a CUDA enum read for op codes holds an initializer or a comment")
}

/// True when `word` is at `at` in `s` as a whole identifier.
const fn matches_word_at(s: &[u8], at: usize, word: &[u8]) -> bool {
    let end = at + word.len();
    matches_at(s, at, word)
        && (at == 0 || !is_identifier(s[at - 1]))
        && (end == s.len() || !is_identifier(s[end]))
}

/// True when `s` holds `word` at `at`.
const fn matches_at(s: &[u8], at: usize, word: &[u8]) -> bool {
    if at + word.len() > s.len() {
        return false;
    }
    let mut i = 0;
    while i < word.len() {
        if s[at + i] != word[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The first position from `at` that is not white space.
const fn skip_space(s: &[u8], mut at: usize) -> usize {
    while at < s.len() && s[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

const fn is_identifier(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "#define X 1\nenum Unit { U_A };\nenum  Pair {\n  P_A,\n  P_B,\n};\n\
                          // enum Ops { O_Z };\nenum Ops { O_A, O_B, O_C };";

    #[test]
    fn codes_are_positions_in_the_named_enum() {
        assert_eq!(enum_code(SOURCE, "Unit", "U_A"), 0);
        assert_eq!(enum_code(SOURCE, "Pair", "P_B"), 1);
        assert_eq!(enum_code(SOURCE, "Ops", "O_A"), 0);
        assert_eq!(enum_code(SOURCE, "Ops", "O_C"), 2);
        assert_eq!([enum_len(SOURCE, "Unit"), enum_len(SOURCE, "Pair")], [1, 2]);
        assert_eq!(enum_len(SOURCE, "Ops"), 3);
    }

    #[test]
    #[should_panic(expected = "no such enumerator")]
    fn a_missing_enumerator_is_refused() {
        enum_code(SOURCE, "Ops", "O_D");
    }

    #[test]
    #[should_panic(expected = "no such enum")]
    fn a_missing_enum_is_refused() {
        enum_code(SOURCE, "Op", "O_A");
    }

    #[test]
    #[should_panic(expected = "initializer")]
    fn an_initializer_is_refused() {
        enum_code("enum E { A = 1, B };", "E", "B");
    }
}
