// Symbol visibility for libgpufeed. The library is built with hidden
// visibility; only declarations marked GPUFEED_EXPORT form the ABI.
#ifndef GPUFEED_EXPORT_H_
#define GPUFEED_EXPORT_H_

#if defined(GPUFEED_STATIC_DEFINE)
#define GPUFEED_EXPORT
#elif defined(GPUFEED_COMPILING_LIBRARY)
#define GPUFEED_EXPORT [[gnu::visibility("default")]]
#else
#define GPUFEED_EXPORT [[gnu::visibility("default")]]
#endif

#endif  // GPUFEED_EXPORT_H_
