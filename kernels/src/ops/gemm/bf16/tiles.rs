//! AMX's tile registers: the process's permission to use them, a thread's tile configuration,
//! and the [`ROWS`] x [`NR`] f32 sums of a strip of `op(a)` with a packed panel of `op(b)` on
//! `TDPBF16PS` (each instruction adds 16 x 16 x 32 products). The instructions are written as
//! assembly: Rust's AMX target features and intrinsics are not stable yet.

use std::arch::asm;
use std::marker::PhantomData;
use std::sync::OnceLock;

use half::bf16;

use super::NR;

/// Output rows of a strip: two tiles of 16 rows.
pub(super) const ROWS: usize = 32;
/// Pairs along the inner dimension a tile row holds (64 bytes).
pub(super) const PAIRS: usize = 16;

/// Proof that this CPU has AMX-TILE and AMX-BF16 and that the kernel let the process use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Permission(());

/// Asks for the permission once (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, Linux 5.16 on), where the
/// CPU reports AMX-TILE and AMX-BF16.
pub(super) fn permission() -> Option<Permission> {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    let granted = *GRANTED.get_or_init(|| {
        use std::arch::x86_64::{__cpuid_count, __get_cpuid_max};
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        const AMX_BF16: u32 = 1 << 22;
        const AMX_TILE: u32 = 1 << 24;
        let reported = __get_cpuid_max(0).0 >= 7 && {
            let features = __cpuid_count(7, 0).edx;
            features & AMX_BF16 != 0 && features & AMX_TILE != 0
        };
        // SAFETY: the call only asks the kernel to enlarge this process's saved state; it
        // reads and writes no memory of ours.
        reported
            && unsafe {
                libc::syscall(
                    libc::SYS_arch_prctl,
                    ARCH_REQ_XCOMP_PERM,
                    XFEATURE_XTILEDATA,
                )
            } == 0
    });
    granted.then_some(Permission(()))
}

/// The tile configuration every strip runs in (`ldtilecfg`'s 64 bytes): palette 1, tiles 0 to
/// 3 the sums, 4 and 5 the strip's two halves, 6 and 7 the panel's two halves; each 16 rows of
/// 64 bytes.
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_a_row: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: Config = Config {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    bytes_a_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// A thread's tiles, configured while this lives and released when it drops (a tile state
/// left in use slows every later save of the thread's registers).
pub(super) struct Tiles {
    /// Tile state belongs to the thread that configured it.
    _thread: PhantomData<*const ()>,
}

/// [`ROWS`] rows of `op(a)` in pairs: row `r`'s pairs from element `r * stride` of `data`.
pub(super) struct Strip<'a> {
    pub(super) data: &'a [bf16],
    pub(super) stride: usize,
}

impl Strip<'_> {
    /// Whether every row's `pairs` pairs lie within `data` (what the tile loads rely on).
    fn holds(&self, pairs: usize) -> bool {
        pairs == 0 || (ROWS - 1) * self.stride + 2 * pairs <= self.data.len()
    }
}

impl Tiles {
    /// Configures this thread's tiles.
    pub(super) fn configure(_: Permission) -> Self {
        // SAFETY: the permission proves the CPU has AMX and the process may use it; the
        // configuration is a valid palette 1 configuration of 64 aligned bytes.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(readonly, nostack, preserves_flags));
        }
        Tiles {
            _thread: PhantomData,
        }
    }

    /// The sums of a strip with a panel of `op(b)` packed as `[pairs][NR]` (`pairs` a multiple
    /// of [`PAIRS`]), row-major in [`NR`] columns.
    pub(super) fn strip_sums(&self, a: &Strip<'_>, panel: &[u32]) -> [f32; ROWS * NR] {
        let mut sums = [0f32; ROWS * NR];
        self.add_strip(a, panel, &mut sums, NR, false);
        sums
    }

    /// `c (+)=` the sums of a strip with a panel (as [`Tiles::strip_sums`]), `c` holding
    /// [`ROWS`] rows of [`NR`] f32 values `ldc` apart: the tiles start from `c`'s values when
    /// `add`, and are stored into it.
    pub(super) fn add_strip(
        &self,
        a: &Strip<'_>,
        panel: &[u32],
        c: &mut [f32],
        ldc: usize,
        add: bool,
    ) {
        let pairs = panel.len() / NR;
        assert!(
            pairs.is_multiple_of(PAIRS) && panel.len() == pairs * NR && a.holds(pairs),
            "a strip or panel is not whole tiles within its operand"
        );
        assert!(
            ldc >= NR && (ROWS - 1) * ldc + NR <= c.len(),
            "a strip's sums lie outside their output"
        );
        let (top, a_stride) = (a.data.as_ptr(), 2 * a.stride);
        let (b, c, c_stride) = (panel.as_ptr(), c.as_mut_ptr(), 4 * ldc);
        // SAFETY: the tiles are configured (`self`) as `CONFIG` says. Each step loads 16 rows
        // of 64 bytes from each half of the strip, which `holds` checked lie within `a`, and 16
        // rows of 64 bytes from each half of a 16-pair slice of the panel, which the assert
        // checked lies within it; the sums are 32 rows of 128 bytes of `c`, asserted above.
        unsafe {
            if add {
                asm!(
                    "tileloadd tmm0, [{c0} + {s} * 1]",
                    "tileloadd tmm1, [{c0} + {s} * 1 + 64]",
                    "tileloadd tmm2, [{c1} + {s} * 1]",
                    "tileloadd tmm3, [{c1} + {s} * 1 + 64]",
                    c0 = in(reg) c,
                    c1 = in(reg) c.add(16 * ldc),
                    s = in(reg) c_stride,
                    options(readonly, nostack, preserves_flags)
                );
            } else {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    options(nomem, nostack, preserves_flags)
                );
            }
            for step in 0..pairs / PAIRS {
                asm!(
                    "tileloadd tmm4, [{a0} + {sa} * 1]",
                    "tileloadd tmm5, [{a1} + {sa} * 1]",
                    "tileloadd tmm6, [{b} + {sb} * 1]",
                    "tileloadd tmm7, [{b} + {sb} * 1 + 64]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) top.add(2 * PAIRS * step),
                    a1 = in(reg) top.add(16 * a.stride + 2 * PAIRS * step),
                    sa = in(reg) a_stride,
                    b = in(reg) b.add(PAIRS * NR * step),
                    sb = in(reg) 4 * NR,
                    options(readonly, nostack, preserves_flags)
                );
            }
            asm!(
                "tilestored [{c0} + {s} * 1], tmm0",
                "tilestored [{c0} + {s} * 1 + 64], tmm1",
                "tilestored [{c1} + {s} * 1], tmm2",
                "tilestored [{c1} + {s} * 1 + 64], tmm3",
                c0 = in(reg) c,
                c1 = in(reg) c.add(16 * ldc),
                s = in(reg) c_stride,
                options(nostack, preserves_flags)
            );
        }
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: releasing the tile state only returns it to its initial state.
        unsafe { asm!("tilerelease", options(nomem, nostack, preserves_flags)) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::pack::pair;
    use super::super::tests::values;
    use super::*;

    #[test]
    fn a_strip_sums_pairs_as_the_scalar_product_does() {
        let Some(permission) = permission() else {
            return;
        };
        let (pairs, stride) = (2 * PAIRS, 2 * 2 * PAIRS + 6);
        let data = values(ROWS * stride, 5);
        let panel: Vec<u32> = (0..pairs * NR)
            .map(|i| pair(values(2, i + 3)[1], values(2, i)[0]))
            .collect();
        let sums = Tiles::configure(permission).strip_sums(
            &Strip {
                data: &data,
                stride,
            },
            &panel,
        );
        let wide = |bits: u32| f32::from_bits(bits << 16);
        for r in 0..ROWS {
            for c in 0..NR {
                let want: f32 = (0..pairs)
                    .map(|p| {
                        let (x, y) = (&data[r * stride + 2 * p..], panel[p * NR + c]);
                        x[0].to_f32() * wide(y & 0xffff) + x[1].to_f32() * wide(y >> 16)
                    })
                    .sum();
                assert_eq!(sums[r * NR + c], want, "row {r}, column {c}");
            }
        }
    }
}
