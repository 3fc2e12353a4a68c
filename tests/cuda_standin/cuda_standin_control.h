// Test controls of the CUDA stand-in (see cuda_runtime_api.h beside this
// file). C functions, so that Python tests reach them through ctypes too.
#ifndef GPUFEED_TESTS_CUDA_STANDIN_CUDA_STANDIN_CONTROL_H_
#define GPUFEED_TESTS_CUDA_STANDIN_CUDA_STANDIN_CONTROL_H_

#ifdef __cplusplus
extern "C" {
#endif

// 1 when some thread created (or made current) device `device`'s primary
// context since the last reset.
int gpufeed_standin_context_created(int device);
void gpufeed_standin_reset_contexts(void);

// Fault for the sensitivity tests: while enabled, cudaStreamWaitEvent calls
// made by any thread other than the one that enabled it succeed and do
// nothing (the device stage's copy thread no longer waits for the consumer's
// release events).
void gpufeed_standin_drop_waits_from_other_threads(int enabled);

// The next cudaEventElapsedTime fails with cudaErrorInvalidResourceHandle
// and leaves it as the calling thread's last error (an unchecked failure
// that a later launch must not inherit).
void gpufeed_standin_fail_next_elapsed_time(void);

// The largest random delay before each stream operation, in microseconds.
void gpufeed_standin_set_max_delay_us(int microseconds);

// Stream operations run so far (copies, kernels, waits, records, host funcs).
unsigned long long gpufeed_standin_operations(void);

// Bytes that cudaMemcpyAsync/cudaMemcpy host-to-device copies have
// finished writing so far.
unsigned long long gpufeed_standin_host_to_device_bytes(void);

// 1 when `pointer` lies inside a live device allocation.
int gpufeed_standin_is_device_pointer(const void* pointer);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // GPUFEED_TESTS_CUDA_STANDIN_CUDA_STANDIN_CONTROL_H_
