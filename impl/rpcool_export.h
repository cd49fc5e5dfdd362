/* SPDX-License-Identifier: MIT */
/* impl/rpcool_export.h - rpcool's shared data: a range of a pod heap exported under a name with
   an ALock table beside it (section 13 of rpcool.h's manual). Part of rpcool.h's
   implementation, included by it; not a header of its own. */

/* >>export - shared data: exports, their locks, optimistic reads ------------------------------- */

RPCOOL_API int rpcool_export_create(shmheap *h, const char *name, void *base, size_t len,
                                    const rpcool_export_opts *opts, rpcool_export **out)
{
    (void)h, (void)name, (void)base, (void)len, (void)opts;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_export_open(shmheap *h, const char *name, rpcool_export **out)
{
    (void)h, (void)name;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_export_close(rpcool_export *x)
{
    (void)x;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API void *rpcool_export_base(const rpcool_export *x, size_t *len)
{
    (void)x;
    if (len) *len = 0;
    return NULL;
}

RPCOOL_API uint32_t rpcool_export_nlocks(const rpcool_export *x)
{
    (void)x;
    return 0;
}

RPCOOL_API int rpcool_export_lock(rpcool_export *x, uint32_t idx, int mode, rpcool_xhold *h)
{
    (void)x, (void)idx, (void)mode, (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_export_unlock(rpcool_xhold *h)
{
    (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_export_read(rpcool_export *x, uint32_t idx, const void *addr, void *buf,
                                  size_t len)
{
    (void)x, (void)idx, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}

/* >>x-remote - shared data: other pods' attachments -------------------------------------------- */

RPCOOL_API int rpcool_attach(const char *url, const rpcool_attach_opts *opts,
                             rpcool_remote **out)
{
    (void)url, (void)opts;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_attach_conn(rpcool_conn *c, const char *name,
                                  const rpcool_attach_opts *opts, rpcool_remote **out)
{
    (void)c, (void)name, (void)opts;
    if (out) *out = NULL;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_detach(rpcool_remote *r)
{
    (void)r;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API void *rpcool_remote_base(const rpcool_remote *r, size_t *len)
{
    (void)r;
    if (len) *len = 0;
    return NULL;
}

RPCOOL_API uint32_t rpcool_remote_nlocks(const rpcool_remote *r)
{
    (void)r;
    return 0;
}

RPCOOL_API int rpcool_remote_read(rpcool_remote *r, const void *addr, void *buf, size_t len)
{
    (void)r, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_write(rpcool_remote *r, void *addr, const void *buf, size_t len)
{
    (void)r, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_lock(rpcool_remote *r, uint32_t idx, int mode, rpcool_xhold *h)
{
    (void)r, (void)idx, (void)mode, (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_unlock(rpcool_xhold *h)
{
    (void)h;
    return RPCOOL_E_NOTSUP;
}

RPCOOL_API int rpcool_remote_read_opt(rpcool_remote *r, uint32_t idx, const void *addr,
                                      void *buf, size_t len)
{
    (void)r, (void)idx, (void)addr, (void)buf, (void)len;
    return RPCOOL_E_NOTSUP;
}
