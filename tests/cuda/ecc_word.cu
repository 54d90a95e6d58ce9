/*
 * ecc_word.cu - compile the headers shared with CUDA as device code
 *
 * Not run (CI has no GPU): `make test` compiles it with nvcc so that
 * ecc_word.h and quant_word.h stay usable from the kernels. Each kernel
 * makes every function of the headers reachable from device code.
 */
#include "ecc_word.h"
#include "quant_word.h"

extern "C" __global__ void kvmem_check_nibble(uint8_t *cw, const uint8_t *d,
					      int *fixed, unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	cw[2 * i] = kvmem_h74_encode(d[i]);
	cw[2 * i + 1] = kvmem_h84_encode(d[i]);
	fixed[2 * i] = kvmem_h74_correct(&cw[2 * i]);
	fixed[2 * i + 1] = kvmem_h84_correct(&cw[2 * i + 1]);
}

extern "C" __global__ void kvmem_check_golay24(uint32_t *cw, int *fixed,
					       unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	cw[i] = kvmem_golay24_encode(cw[i]);
	fixed[i] = kvmem_golay24_correct(&cw[i]);
}

extern "C" __global__ void kvmem_check_secded72(uint64_t *data,
						uint8_t *check, int *fixed,
						unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	check[i] = kvmem_secded72_encode(data[i]);
	fixed[i] = kvmem_secded72_correct(&data[i], &check[i]);
}

extern "C" __global__ void kvmem_check_half(const float *x, float *y,
					    uint16_t *up, int *q,
					    unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	y[i] = kvmem_h2f(kvmem_f2h(x[i]));
	up[i] = kvmem_f2h_up(x[i]);
	q[i] = kvmem_sext(up[i], 4);
}
