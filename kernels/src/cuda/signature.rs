//! Kernel parameter lists as the compiled PTX declares them, so that a launch whose arguments
//! do not match its kernel fails with a typed error instead of handing the GPU wrong bytes.

use std::collections::HashMap;

use super::args::{Arg, Walk};

/// One kernel parameter, as far as a launch can tell parameters apart: by size and by whether
/// it is a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// A 32-bit integer (`.u32`, `.s32`, `.b32`): `int`, `unsigned`.
    Int32,
    /// A 64-bit integer or a pointer (`.u64`, `.s64`, `.b64`).
    Int64,
    /// A `float` (`.f32`).
    Float32,
    /// A `double` (`.f64`).
    Float64,
    /// A struct passed by value, of this many bytes (`.b8 name[N]`).
    Bytes(usize),
    /// Any other PTX type, written as PTX writes it.
    Other,
}

impl Param {
    /// Reads one `.param` declaration such as `.param .align 8 .b8 k_param_3[136]`.
    fn parse(declaration: &str) -> Param {
        let mut words = declaration
            .split_whitespace()
            .filter(|word| *word != ".param");
        let mut kind = words.next().unwrap_or_default();
        if kind == ".align" {
            words.next();
            kind = words.next().unwrap_or_default();
        }
        let name = words.next().unwrap_or_default();
        match kind {
            ".u32" | ".s32" | ".b32" => Param::Int32,
            ".u64" | ".s64" | ".b64" => Param::Int64,
            ".f32" => Param::Float32,
            ".f64" => Param::Float64,
            ".b8" => name
                .split_once('[')
                .and_then(|(_, len)| len.trim_end_matches([']', ',']).parse().ok())
                .map_or(Param::Other, Param::Bytes),
            _ => Param::Other,
        }
    }

    /// True when `arg` is passed as this parameter expects.
    fn accepts(self, arg: &Arg) -> bool {
        match (self, arg) {
            (Param::Int32, Arg::U32(_) | Arg::I32(_))
            | (Param::Int64, Arg::U64(_))
            | (Param::Float64, Arg::F64(_)) => true,
            (Param::Bytes(n), Arg::Walk(_)) => n == size_of::<Walk>(),
            _ => false,
        }
    }
}

/// The parameter list of every `.entry` in `ptx`, by kernel name.
pub(crate) fn signatures(ptx: &str) -> HashMap<String, Vec<Param>> {
    let mut found = HashMap::new();
    let mut lines = ptx.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some((_, rest)) = line.split_once(".entry ") else {
            continue;
        };
        let Some((name, after)) = rest.split_once('(') else {
            continue;
        };
        let mut params = Vec::new();
        if !after.trim_start().starts_with(')') {
            for line in lines.by_ref() {
                if line.starts_with(')') {
                    break;
                }
                if line.starts_with(".param") {
                    params.push(Param::parse(line));
                }
            }
        }
        found.insert(name.trim().to_owned(), params);
    }
    found
}

/// Checks `args` against `params`: `Err` says where they part, for the kernel's error.
pub(crate) fn check_arguments(params: &[Param], args: &[Arg]) -> Result<(), String> {
    if params.len() != args.len() {
        return Err(format!(
            "it takes {} parameters {params:?}, the launch passed {} arguments",
            params.len(),
            args.len()
        ));
    }
    match params
        .iter()
        .zip(args)
        .position(|(param, arg)| !param.accepts(arg))
    {
        None => Ok(()),
        Some(index) => Err(format!(
            "parameter {index} is {:?}, the launch passed {}",
            params[index],
            args[index].kind()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "
.version 9.0
.target sm_90
.visible .entry scale_f32(
\t.param .u32 scale_f32_param_0,
\t.param .f64 scale_f32_param_1,
\t.param .u64 scale_f32_param_2,
\t.param .align 8 .b8 scale_f32_param_3[136],
\t.param .f32 scale_f32_param_4
)
{
\tret;
}
.visible .entry nothing()
{
\tret;
}
";

    fn walk() -> Arg {
        let [walk] = Walk::merged(&[2, 3], [&[3, 1]], "test").unwrap();
        walk.into()
    }

    #[test]
    fn every_entry_and_parameter_is_read() {
        let found = signatures(PTX);
        assert_eq!(found.len(), 2);
        assert_eq!(
            found["scale_f32"],
            [
                Param::Int32,
                Param::Float64,
                Param::Int64,
                Param::Bytes(136),
                Param::Float32
            ]
        );
        assert!(found["nothing"].is_empty());
        assert_eq!(size_of::<Walk>(), 136, "the layout of `struct Walk`");
    }

    #[test]
    fn arguments_must_match_in_number_size_and_kind() {
        let params = &signatures(PTX)["scale_f32"][..4];
        let good = [1u32.into(), 0.5f64.into(), 7u64.into(), walk()];
        assert_eq!(check_arguments(params, &good), Ok(()));
        let swapped = [0.5f64.into(), 1u32.into(), 7u64.into(), walk()];
        let err = check_arguments(params, &swapped).unwrap_err();
        assert!(err.contains("parameter 0 is Int32"), "{err}");
        let narrow = [1u32.into(), 0.5f64.into(), 7u32.into(), walk()];
        assert!(check_arguments(params, &narrow).is_err());
        let short = [1u32.into(), 0.5f64.into(), 7u64.into()];
        let err = check_arguments(params, &short).unwrap_err();
        assert!(err.contains("takes 4 parameters"), "{err}");
        // No argument kind passes as a float: such a kernel is refused until one exists.
        let all = signatures(PTX)["scale_f32"].clone();
        let five = [
            1u32.into(),
            0.5f64.into(),
            7u64.into(),
            walk(),
            0.5f64.into(),
        ];
        assert!(check_arguments(&all, &five).is_err());
    }

    #[test]
    fn every_compiled_kernel_takes_only_parameters_a_launch_can_pass() {
        use crate::Error;
        use crate::cuda::{Family, compile_ptx};
        let required = std::env::var_os("HEADROOM_REQUIRE_NVRTC").is_some();
        let mut kernels = 0;
        for family in Family::ALL {
            let ptx = match compile_ptx(family, "compute_90") {
                Ok(ptx) => ptx,
                Err(Error::NoCudaLibrary { detail, .. }) if !required => {
                    return eprintln!("skipped: NVRTC is not installed here ({detail})");
                }
                Err(err) => panic!("{}: {err}", family.file()),
            };
            let found = signatures(&ptx);
            assert_eq!(
                found.len(),
                ptx.matches(".entry ").count(),
                "{}",
                family.file()
            );
            for (name, params) in found {
                assert!(!params.is_empty(), "{name} takes no parameters");
                for param in params {
                    assert!(
                        matches!(
                            param,
                            Param::Int32 | Param::Int64 | Param::Float64 | Param::Bytes(136)
                        ),
                        "{name} takes {param:?}, which no launch argument is"
                    );
                }
                kernels += 1;
            }
        }
        assert!(kernels >= 180, "only {kernels} kernels");
    }
}
