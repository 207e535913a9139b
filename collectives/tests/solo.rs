//! A world of one process: the collectives keep or copy each array, and refuse what a larger
//! world would refuse.

mod common;

use common::assert_refused;
use headroom_collectives::{Collective, Error, ReduceOp, Solo};
use headroom_kernels::{Array, DType, Device, DeviceConfig};

fn cpu() -> Device {
    Device::cpu(DeviceConfig::new(1 << 20)).unwrap()
}

fn values(array: &Array) -> Vec<f32> {
    array.to_host::<f32>().unwrap()
}

#[test]
fn every_collective_of_one_rank_keeps_or_copies_its_array() {
    let device = cpu();
    let mut world = Solo::new(&device);
    assert_eq!((world.rank(), world.world_size()), (0, 1));
    let data = [1.5f32, -2.0, 3.25, 4.0, 0.5, -6.0];
    for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
        let mut array = Array::from_host(&device, [2, 3], &data).unwrap();
        world.all_reduce(&mut array, op).unwrap();
        assert_eq!(values(&array), data, "{op:?}");
    }
    let input = Array::from_host(&device, [6], &data).unwrap();
    let mut output = Array::zeros(&device, [2, 3], DType::F32).unwrap();
    world
        .reduce_scatter(&input, &mut output, ReduceOp::Sum)
        .unwrap();
    assert_eq!(values(&output), data);
    let mut gathered = Array::zeros(&device, [6], DType::F32).unwrap();
    world.all_gather(&output, &mut gathered).unwrap();
    assert_eq!(values(&gathered), data);
    world.broadcast(&mut gathered, 0).unwrap();
    assert_eq!(values(&gathered), data);
    world.barrier().unwrap();
}

#[test]
fn arguments_a_larger_world_would_refuse_are_named() {
    let device = cpu();
    let mut world = Solo::new(&device);
    let mut array = Array::zeros(&device, [4], DType::F32).unwrap();
    let err = world.broadcast(&mut array, 1).unwrap_err();
    assert_refused(&err, "broadcast");
    assert!(err.to_string().contains("root 1"), "{err}");

    let mut short = Array::zeros(&device, [3], DType::F32).unwrap();
    let err = world
        .reduce_scatter(&array, &mut short, ReduceOp::Sum)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the input's 4 elements are not 1 chunks (one per rank) of the output's 3"),
        "{err}"
    );
    let err = world.all_gather(&array, &mut short).unwrap_err();
    assert_refused(&err, "all_gather");

    let mut halves = Array::zeros(&device, [4], DType::BF16).unwrap();
    let err = world.all_gather(&array, &mut halves).unwrap_err();
    assert!(
        err.to_string()
            .contains("the input holds f32 and the output bf16"),
        "{err}"
    );

    let mut counts = Array::zeros(&device, [4], DType::U32).unwrap();
    let err = world.all_reduce(&mut counts, ReduceOp::Avg).unwrap_err();
    assert!(
        err.to_string()
            .contains("the mean of u32 values is not a u32"),
        "{err}"
    );

    let other = cpu();
    let mut elsewhere = Array::zeros(&other, [4], DType::F32).unwrap();
    let err = world.all_reduce(&mut elsewhere, ReduceOp::Sum).unwrap_err();
    assert_refused(&err, "all_reduce");
}

#[test]
fn an_array_shared_with_another_handle_is_not_written_in_place() {
    let device = cpu();
    let mut world = Solo::new(&device);
    let mut array = Array::zeros(&device, [4], DType::F32).unwrap();
    let _other = array.clone();
    let err = world.all_reduce(&mut array, ReduceOp::Sum).unwrap_err();
    assert!(matches!(err, Error::Kernels(_)), "{err}");
}
