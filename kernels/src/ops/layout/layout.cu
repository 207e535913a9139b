// Layout changes, which move elements without reading them as numbers: one kernel per element
// size serves every dtype of that size.

#define LAYOUT(bytes, T) \
    extern "C" __global__ void gather_##bytes(const T* x, T* out, u64 n, Walk walk) { \
        for (u64 i = thread_index(); i < n; i += grid_stride()) out[i] = x[walk_offset(walk, walk.strides, i)]; \
    } \
    extern "C" __global__ void concat_piece_##bytes(const T* piece, T* out, u64 outer, u64 width, \
                                                   u64 total, u64 at) { \
        for (u64 i = thread_index(); i < outer * width; i += grid_stride()) \
            out[(i / width) * total + at + i % width] = piece[i]; \
    }
LAYOUT(1, u8)
LAYOUT(2, u16)
LAYOUT(4, u32)
LAYOUT(8, u64)
// Sixteen bytes of elements of any size, where a walk's innermost run, its other strides and its
// start allow: a fraction of the iterations, loads and stores of the element's own size.
LAYOUT(16, Pack<u32>)
