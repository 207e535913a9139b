// Optimizer updates, one pass over each parameter and its state. The step's constants come
// from the host in f64 and are rounded to the compute precision here, as on the host.

#define OPTIM(name, T) \
    extern "C" __global__ void adamw_##name(T* param, const T* grad, T* m, T* v, u64 n, \
                                            double scale, double b1, double b2, double decay, \
                                            double step_size, double root_correction, double eps) { \
        typedef Io<T> io; \
        typedef typename io::C C; \
        const C s = (C)scale, c1 = (C)b1, c2 = (C)b2, d = (C)decay, lr = (C)step_size; \
        const C root = (C)root_correction, e = (C)eps; \
        for (u64 i = thread_index(); i < n; i += grid_stride()) { \
            const C g = io::load(grad[i]) * s; \
            const C m_new = c1 * io::load(m[i]) + ((C)1 - c1) * g; \
            const C v_new = c2 * io::load(v[i]) + ((C)1 - c2) * g * g; \
            const C denom = m_sqrt(v_new) / root + e; \
            param[i] = io::store(io::load(param[i]) * d - lr * m_new / denom); \
            m[i] = io::store(m_new); \
            v[i] = io::store(v_new); \
        } \
    } \
    extern "C" __global__ void sgd_##name(T* param, const T* grad, T* buffer, u64 n, double lr, \
                                          double weight_decay, double momentum, double scale, \
                                          double undamped, int first, int nesterov) { \
        typedef Io<T> io; \
        typedef typename io::C C; \
        const C rate = (C)lr, wd = (C)weight_decay, mu = (C)momentum, s = (C)scale, u = (C)undamped; \
        for (u64 i = thread_index(); i < n; i += grid_stride()) { \
            const C p = io::load(param[i]); \
            const C d = io::load(grad[i]) * s + wd * p; \
            C step = d; \
            if (buffer) { \
                const C b = first ? d : mu * io::load(buffer[i]) + u * d; \
                buffer[i] = io::store(b); \
                step = nesterov ? d + mu * b : b; \
            } \
            param[i] = io::store(p - rate * step); \
        } \
    }
FOR_FLOATS(OPTIM)
