/*
 * bcryptprimitives.dll for Wine 8.0 (Debian 12), which lacks ProcessPrng.
 *
 * Go's Windows runtime (1.24 and later) loads this DLL from System32 at
 * start and reads random bytes from its ProcessPrng; without it every Go
 * program dies with "bcryptprimitives.dll not found". Wine 8.0 does have
 * advapi32's RtlGenRandom (exported as SystemFunction036), so ProcessPrng
 * is served from that. Only for running test binaries under Wine in CI.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size)
{
	/* RtlGenRandom takes a 32-bit length, ProcessPrng a size_t one. */
	while (size > 0) {
		ULONG n = size > 0x40000000 ? 0x40000000 : (ULONG)size;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		size -= n;
	}
	/* The real ProcessPrng never fails; the runtime aborts if it does. */
	return TRUE;
}
