/*
 * libFuzzer target: every body decoder of the wire protocol on arbitrary
 * bytes. Build with -DTL_FUZZ=ON (clang), then run
 *   ./build-fuzz/tests/fuzz_msgs -max_total_time=60
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_msgs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tlf_run_decoders(data, size);
	return 0;
}
