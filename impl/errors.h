/* SPDX-License-Identifier: MIT */
/* impl/errors.h - the one error story of the rpcool headers. Internal, not a public API.
 *
 * Each header owns a block of 100 codes, counting up from its number: shmheap -1000, rpcool
 * -2000, alock -3000, krconn -4000, nppin -5000. Every X_strerror is the same switch:
 *
 *     switch (code) {
 *     #define RCP__ERROR_CASE(name, value, text) case name: return text;
 *     #include "impl/errors.h"   // the codes of every rpcool header included so far
 *     #undef RCP__ERROR_CASE
 *     default: return rcp__errtext(code, RCP__ERR_DECLARED);
 *     }
 *
 * Included with RCP__ERROR_CASE defined, this file expands the X-macro list of each header
 * whose declarations came before that point, so a code passed through from another header
 * keeps its text, and two headers' blocks that met would not compile (duplicate case).
 * rcp__errtext is the one fallback: 0 is success; -1 to -4095 outside the blocks is -errno
 * (strerror's text, when the system knows that errno); a code in the block of a header that was
 * not declared there names that header; anything else (a code no header has, an unused code of
 * a declared header's block) is "unknown error code". RCP__ERR_DECLARED, set by the same
 * include, is the mask of the headers declared so far (bit 0 shmheap ... bit 4 nppin). Every
 * text is static: strerror's own buffer for an errno it does not know would not outlive its next
 * call. */
#ifndef RCP__ERRORS_H
#define RCP__ERRORS_H
#include <string.h>

static inline const char *rcp__errtext(int code, unsigned declared)
{
    static const char *const owner[] = {
        "an error code of shmheap.h (shmheap_strerror explains it)",
        "an error code of rpcool.h (rpcool_strerror explains it)",
        "an error code of alock.h (alock_strerror explains it)",
        "an error code of krconn.h (krconn_strerror explains it)",
        "an error code of nppin.h (nppin_strerror explains it)"};
    int block = code < 0 && code >= -5000 ? (99 - code) / 1000 : 0; /* 1 = -1000 ... -901 */
    if (code == 0) return "success";
    if (block >= 1 && -code <= block * 1000)
        return declared >> (block - 1) & 1u ? "unknown error code" : owner[block - 1];
    if (code < 0 && code > -4096) { /* GNU strerror_r: a known errno's text is static */
        char unknown[1];
        const char *s = strerror_r(-code, unknown, sizeof unknown);
        if (s != unknown) return s;
    }
    return "unknown error code";
}
#endif /* RCP__ERRORS_H */

#ifdef RCP__ERROR_CASE /* inside a strerror's switch: the cases of every table defined so far */
#undef RCP__ERR_DECLARED
#undef RCP__ERR_D0
#undef RCP__ERR_D1
#undef RCP__ERR_D2
#undef RCP__ERR_D3
#undef RCP__ERR_D4
#ifdef SHMHEAP_ERRORS
SHMHEAP_ERRORS(RCP__ERROR_CASE)
#define RCP__ERR_D0 1u
#else
#define RCP__ERR_D0 0u
#endif
#ifdef RPCOOL_ERRORS
RPCOOL_ERRORS(RCP__ERROR_CASE)
#define RCP__ERR_D1 2u
#else
#define RCP__ERR_D1 0u
#endif
#ifdef ALOCK_ERRORS
ALOCK_ERRORS(RCP__ERROR_CASE)
#define RCP__ERR_D2 4u
#else
#define RCP__ERR_D2 0u
#endif
#ifdef KRCONN_ERRORS
KRCONN_ERRORS(RCP__ERROR_CASE)
#define RCP__ERR_D3 8u
#else
#define RCP__ERR_D3 0u
#endif
#ifdef NPPIN_ERRORS
NPPIN_ERRORS(RCP__ERROR_CASE)
#define RCP__ERR_D4 16u
#else
#define RCP__ERR_D4 0u
#endif
#define RCP__ERR_DECLARED (RCP__ERR_D0 | RCP__ERR_D1 | RCP__ERR_D2 | RCP__ERR_D3 | RCP__ERR_D4)
#endif /* RCP__ERROR_CASE */
