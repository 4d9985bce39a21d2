/* Symbol visibility for Timeline's public API: libraries are built with
 * hidden visibility and export only what is marked TL_API. */
#ifndef TIMELINE_VISIBILITY_H
#define TIMELINE_VISIBILITY_H
#if defined(__GNUC__) || defined(__clang__)
#define TL_API __attribute__((visibility("default")))
#else
#define TL_API
#endif
#endif
