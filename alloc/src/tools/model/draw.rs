//! Drawing a scenario's whole configuration from fuzzer bytes, edges first.
//!
//! The capacity, limit, internal-fragmentation cap, history capacity and failing reserve are each
//! picked by a selector byte: five times in eight from a table of common edges (zero slack, a
//! one-granule limit, a limit above the capacity, a history ring of 0 or 1 events...), once in
//! eight from a table of rarer or invalid ones (a limit below one granule, fractions of 0, below
//! 0, above 1, NaN), and twice in eight freely. The growth policy and garbage collection are
//! drawn uniformly. When the bytes run out, every selector reads 0 and picks the first common
//! entry: an ordinary configuration.

use arbitrary::{Arbitrary, Result, Unstructured};

use super::Scenario;
use super::action::Action;
use crate::bookkeeping::size::GRANULE;
use crate::policy::config::{AllocatorConfig, DEFAULT_MAX_INTERNAL_FRAGMENTATION, Growth, Limit};

const MIB: u64 = 1 << 20;

/// Source capacities: ordinary, odd-sized, exactly one granule, huge.
const CAPACITIES: [u64; 6] = [
    4 * MIB,
    MIB,
    3 * MIB + 3 * GRANULE,
    64 * MIB,
    GRANULE,
    1 << 50,
];
/// The first region's size and just above, and capacities below one granule, where every limit
/// is invalid.
const ODD_CAPACITIES: [u64; 4] = [2 * MIB, 2 * MIB + GRANULE, GRANULE - 1, 0];

/// Internal-fragmentation caps: zero slack, one granule, larger, the default.
const SLACKS: [u64; 5] = [4096, 0, GRANULE, MIB, DEFAULT_MAX_INTERNAL_FRAGMENTATION];
/// Caps around one granule, and one that never forces a split.
const ODD_SLACKS: [u64; 4] = [1, GRANULE - 1, GRANULE + 1, u64::MAX];

/// History capacities: some, off, one event, a few.
const HISTORIES: [usize; 4] = [64, 0, 1, 5];
/// Two events, and more than any scenario records.
const ODD_HISTORIES: [usize; 2] = [2, 100_000];

/// Which reserve the source refuses: none, or the first (a preallocation).
const FAILING_RESERVES: [u8; 2] = [0, 1];
/// The next reserves.
const LATER_FAILING_RESERVES: [u8; 2] = [2, 3];

/// Valid limits for a source of `capacity` bytes: all of it, in bytes (ordinary, just above the
/// first region, one granule, above the capacity, the largest), and as fractions (half, almost
/// all, one granule's worth, which may round below it).
fn limits(capacity: u64) -> [Limit; 9] {
    [
        Limit::Fraction(1.0),
        Limit::Bytes(3 * MIB),
        Limit::Bytes(2 * MIB + GRANULE),
        Limit::Bytes(GRANULE),
        Limit::Bytes(capacity.saturating_add(GRANULE)),
        Limit::Bytes(u64::MAX),
        Limit::Fraction(0.5),
        Limit::Fraction(1.0 - f64::EPSILON),
        Limit::Fraction(GRANULE as f64 / capacity as f64),
    ]
}

/// Invalid limits: below one granule, zero, a fraction so small it resolves to 0 bytes, and the
/// fractions 0, negative, above 1, NaN and infinity.
const INVALID_LIMITS: [Limit; 8] = [
    Limit::Bytes(GRANULE - 1),
    Limit::Bytes(0),
    Limit::Fraction(f64::MIN_POSITIVE),
    Limit::Fraction(0.0),
    Limit::Fraction(-0.5),
    Limit::Fraction(1.0 + f64::EPSILON),
    Limit::Fraction(f64::NAN),
    Limit::Fraction(f64::INFINITY),
];

/// An entry of `common` five times in eight, of `rare` once in eight, otherwise `free(u)`.
fn pick<'a, T: Copy>(
    u: &mut Unstructured<'a>,
    common: &[T],
    rare: &[T],
    free: impl FnOnce(&mut Unstructured<'a>) -> Result<T>,
) -> Result<T> {
    let selector = usize::from(u8::arbitrary(u)?);
    match selector {
        0..160 => Ok(common[selector % common.len()]),
        160..192 => Ok(rare[selector % rare.len()]),
        _ => free(u),
    }
}

/// A limit drawn freely: half the time any byte count up to twice the capacity, else mostly a
/// fraction in [-0.1, 1.2], sometimes any 64 bits read as a float.
fn free_limit(u: &mut Unstructured<'_>, capacity: u64) -> Result<Limit> {
    Ok(match u8::arbitrary(u)? % 8 {
        0..4 => Limit::Bytes(u.int_in_range(0..=capacity.saturating_mul(2))?),
        4..7 => Limit::Fraction(f64::from(u16::arbitrary(u)?) / 50_000.0 - 0.1),
        _ => Limit::Fraction(f64::from_bits(u64::arbitrary(u)?)),
    })
}

/// Sources' growth steps: a CUDA page, none (regions that cannot grow in place), the granule,
/// a host page.
const GROWTH_STEPS: [Option<u64>; 4] = [Some(2 * MIB), None, Some(GRANULE), Some(4096)];
/// Steps of no common size.
const ODD_GROWTH_STEPS: [Option<u64>; 2] = [Some(3 * GRANULE), Some(1 << 30)];

/// What a scenario is drawn with besides its actions.
struct Setup {
    capacity: u64,
    config: AllocatorConfig,
    fail_reserve: u8,
    growth_step: Option<u64>,
    streams: bool,
}

/// The capacity, configuration and failing reserve of a scenario, its source's growth step, and
/// whether it has a stream clock.
fn draw_setup(u: &mut Unstructured<'_>) -> Result<Setup> {
    let capacity = pick(u, &CAPACITIES, &ODD_CAPACITIES, |u| {
        u.int_in_range(0..=128 * MIB)
    })?;
    let limit = pick(u, &limits(capacity), &INVALID_LIMITS, |u| {
        free_limit(u, capacity)
    })?;
    let growth = [Growth::OnDemand, Growth::Preallocate, Growth::Expandable]
        [usize::from(u8::arbitrary(u)? % 3)];
    let garbage_collection = !bool::arbitrary(u)?;
    let slack = pick(u, &SLACKS, &ODD_SLACKS, |u| {
        Ok(1 << (u8::arbitrary(u)? % 40))
    })?;
    let history = pick(u, &HISTORIES, &ODD_HISTORIES, |u| {
        Ok(usize::from(u16::arbitrary(u)?))
    })?;
    let fail_reserve = pick(u, &FAILING_RESERVES, &LATER_FAILING_RESERVES, u8::arbitrary)?;
    let config = AllocatorConfig {
        limit,
        growth,
        garbage_collection,
        max_internal_fragmentation: slack,
        history_capacity: history,
    };
    let growth_step = pick(u, &GROWTH_STEPS, &ODD_GROWTH_STEPS, |u| {
        Ok(Some(u64::from(u16::arbitrary(u)?)))
    })?;
    let streams = bool::arbitrary(u)?;
    Ok(Setup {
        capacity,
        config,
        fail_reserve,
        growth_step,
        streams,
    })
}

impl<'a> Arbitrary<'a> for Scenario {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let setup = draw_setup(u)?;
        Ok(Self {
            capacity: setup.capacity,
            config: setup.config,
            fail_reserve: setup.fail_reserve,
            growth_step: setup.growth_step,
            streams: setup.streams,
            actions: u.arbitrary()?,
        })
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> Result<Self> {
        let setup = draw_setup(&mut u)?;
        Ok(Self {
            capacity: setup.capacity,
            config: setup.config,
            fail_reserve: setup.fail_reserve,
            growth_step: setup.growth_step,
            streams: setup.streams,
            actions: Vec::<Action>::arbitrary_take_rest(u)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::model::Construction;
    use crate::tools::trace::SplitMix64;

    /// Random bytes draw every edge of the configuration, most of them often.
    #[test]
    fn random_bytes_draw_the_edges_often() {
        let mut rng = SplitMix64::new(7);
        let draws = 4000;
        let (mut zero_slack, mut one_granule, mut below_granule, mut nan) = (0, 0, 0, 0);
        let (mut invalid, mut builds, mut no_history, mut one_event) = (0, 0, 0, 0);
        let (mut growths, mut fixed_regions, mut with_streams) = ([0; 3], 0, 0);
        for _ in 0..draws {
            let bytes: Vec<u8> = (0..32).map(|_| rng.next_u64() as u8).collect();
            let Setup {
                capacity,
                config,
                fail_reserve: fail,
                growth_step,
                streams,
            } = draw_setup(&mut Unstructured::new(&bytes)).unwrap();
            fixed_regions += usize::from(growth_step.is_none());
            with_streams += usize::from(streams);
            zero_slack += usize::from(config.max_internal_fragmentation == 0);
            one_granule += usize::from(config.limit == Limit::Bytes(GRANULE));
            below_granule += usize::from(config.limit == Limit::Bytes(GRANULE - 1));
            nan += usize::from(matches!(config.limit, Limit::Fraction(f) if f.is_nan()));
            no_history += usize::from(config.history_capacity == 0);
            one_event += usize::from(config.history_capacity == 1);
            growths[config.growth as usize] += 1;
            match Construction::expect(capacity, &config, fail) {
                Construction::Builds { .. } => builds += 1,
                Construction::InvalidConfig => invalid += 1,
                Construction::SourceRefuses => {}
            }
        }
        // A common edge comes up over 5/8 / 9 of the time, a rare one over 1/8 / 8.
        for count in [
            zero_slack,
            one_granule,
            no_history,
            one_event,
            fixed_regions,
            with_streams,
        ] {
            assert!(count > draws / 20, "{count} of {draws}");
        }
        for count in [below_granule, nan] {
            assert!(count > draws / 80, "{count} of {draws}");
        }
        assert!(
            growths.iter().all(|&count| count > draws / 4),
            "{growths:?}"
        );
        // Most configurations build an allocator; a good share must not.
        assert!(builds > draws * 6 / 10, "{builds} of {draws} build");
        assert!(invalid > draws / 10, "{invalid} of {draws} are invalid");
    }
}
