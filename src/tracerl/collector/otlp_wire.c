/* tracerl.collector._otlp_wire: an OTLP ExportTraceServiceRequest, read straight from its
 * protobuf wire format into the Python values the collector stores.
 *
 * Why: reading span attributes through protobuf message objects costs ~1.6 us per attribute
 * in Python, most of the collector's CPU per span. This walks the bytes once and builds only
 * the Python objects that end up in the table.
 *
 * Contract (tests/collector/test_otlp_wire.py checks it against the upb path,
 * tracerl.collector.otlp.trace_records, value for value):
 *
 *   decode_trace_request(body, packed) -> (resources, scopes, spans, check)
 *     resources: [dict]                      key_values(resource_spans[i].resource.attributes)
 *     scopes:    [(resource index, name or None, version or None)]
 *     spans:     one list per column, one item per span: scope index, trace_id, span_id (hex),
 *                parent_span_id (hex, None when empty), name, kind (int), start, end,
 *                status code (int), status message or None, attributes (dict), events,
 *                links (lists of dicts, () when none), then one column per entry of ``packed``.
 *     check:     indices of the spans whose ids are not plain (16 / 8 bytes, not all zero) or
 *                whose attributes still hold a token attribute: the collector applies its
 *                own rules (otlp.hex_ids, decode_tokens) to these; for the others they would
 *                change nothing.
 *     packed:    ((attribute key, prefix, item size), ...): token attributes that may come
 *                packed ("tokpack:i4:<base64>", src/tracerl/schemas/tokens.py). A span's value of such a
 *                key that is a packed string in the form unpack() reads, or (prefixes ending
 *                "i4:" / "f4:") a plain OTel array of int / double items that decode_array
 *                stores as they are (plain_items()), is returned as the items' little-endian
 *                bytes in its column and left out of the attributes;
 *                otherwise the column holds None and the value stays in the attributes
 *                (where such a key may sit at another position than in key_values: the
 *                column builder takes it out of the attributes anyway).
 *
 * Attribute values: str, bool, int, float, bytes, list (array_value), dict (kvlist_value),
 * None (no value); the last of repeated keys wins, at the position of its first occurrence.
 *
 * Anything this decoder does not reproduce exactly raises ValueError, and the caller uses
 * the upb path instead: malformed input (bad varints, lengths past the end, groups, field
 * number 0, invalid UTF-8), nesting deeper than MAX_DEPTH, a known field with an unexpected
 * wire type, a singular message field given twice (protobuf would merge the two), and any
 * AnyValue field other than the seven value kinds (a newer value kind). Unknown fields
 * elsewhere are skipped, as protobuf does. Every read is bounds-checked: the body is
 * untrusted network input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Depth counts message levels, as protobuf's recursion limit (100) does: a span's KeyValue is
 * at level 4 (request, ResourceSpans, ScopeSpans, Span, KeyValue); a nested array adds 2, a kvlist 3. */
#define MAX_DEPTH 64
#define ATTRIBUTE_DEPTH 4
#define CACHE_SLOTS 1024 /* power of two */
#define CACHE_MAX_LEN 32 /* only short strings (keys, enum-like values) are worth sharing */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

#define SPAN_FIELDS 13 /* columns of a span before its packed token arrays */
#define MAX_PACKED 8

/* A token attribute sent packed: "<prefix><base64 of little-endian items>" (src/tracerl/schemas/tokens.py). */
typedef struct {
    PyObject *key_str; /* borrowed from the caller's argument */
    const char *key, *prefix;
    Py_ssize_t key_size, prefix_size, itemsize;
    char kind; /* 'i' (int32) or 'f' (float32) for a prefix "...i4:" / "...f4:": plain arrays of it are read too; 0: not */
} Packed;

typedef struct {
    const uint8_t *start; /* of the body: error messages give byte offsets */
    /* Per-call cache of short ASCII strings (attribute keys mostly): one object per distinct
     * string per request instead of one per occurrence, and its hash is computed once. */
    PyObject *cache[CACHE_SLOTS];
    Packed packed[MAX_PACKED];
    int n_packed;
    PyObject *spans[SPAN_FIELDS + MAX_PACKED]; /* the spans, column by column (lists) */
    PyObject *check; /* indices of the spans the collector's own rules must look at */
} Decoder;

static signed char base64_values[256]; /* -1: not in the standard alphabet ('=' included) */

static PyObject *s_name, *s_time_unix_nano, *s_attributes, *s_trace_id, *s_span_id;

/* ---- errors -------------------------------------------------------------------------- */

static int fail(Decoder *d, const uint8_t *at, const char *what) {
    PyErr_Format(PyExc_ValueError, "OTLP wire decoder: %s at byte %zd", what, (Py_ssize_t)(at - d->start));
    return -1;
}

/* ---- primitive reads (all bounds-checked) -------------------------------------------- */

static inline int read_varint(Decoder *d, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t value = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end) return fail(d, p, "truncated varint");
        uint8_t byte = *p++;
        if (shift == 63 && byte > 1) return fail(d, p - 1, "varint beyond 64 bits");
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            *pp = p;
            return 0;
        }
    }
    return fail(d, p, "varint beyond 64 bits"); /* not reached: the 10th byte is checked above */
}

static inline int read_tag(Decoder *d, const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire_type) {
    const uint8_t *at = *pp;
    uint64_t tag;
    if (read_varint(d, pp, end, &tag)) return -1;
    if (tag > UINT32_MAX || (tag >> 3) == 0) return fail(d, at, "invalid field number");
    *field = (uint32_t)(tag >> 3);
    *wire_type = (int)(tag & 7);
    return 0;
}

static inline int read_fixed(Decoder *d, const uint8_t **pp, const uint8_t *end, int size, uint64_t *out) {
    const uint8_t *p = *pp;
    if (end - p < size) return fail(d, p, "truncated fixed-width field");
    uint64_t value = 0;
    for (int i = size - 1; i >= 0; i--) value = (value << 8) | p[i]; /* little-endian on the wire */
    *out = value;
    *pp = p + size;
    return 0;
}

/* A length-delimited field: its bytes [*data, *data + *size), which lie inside the body. */
static inline int read_len(Decoder *d, const uint8_t **pp, const uint8_t *end, const uint8_t **data, Py_ssize_t *size) {
    uint64_t n;
    const uint8_t *at = *pp;
    if (read_varint(d, pp, end, &n)) return -1;
    if (n > (uint64_t)(end - *pp)) return fail(d, at, "length past the end of its message");
    *data = *pp;
    *size = (Py_ssize_t)n;
    *pp += n;
    return 0;
}

static int skip_field(Decoder *d, const uint8_t **pp, const uint8_t *end, int wire_type) {
    uint64_t ignored;
    const uint8_t *data;
    Py_ssize_t size;
    switch (wire_type) {
    case WT_VARINT: return read_varint(d, pp, end, &ignored);
    case WT_I64: return read_fixed(d, pp, end, 8, &ignored);
    case WT_LEN: return read_len(d, pp, end, &data, &size);
    case WT_I32: return read_fixed(d, pp, end, 4, &ignored);
    default: return fail(d, *pp, "unsupported wire type (group or invalid)");
    }
}

static inline int expect(Decoder *d, const uint8_t *at, int wire_type, int wanted) {
    return wire_type == wanted ? 0 : fail(d, at, "known field with an unexpected wire type");
}

/* A length-delimited field (string, bytes, message): its wire type must be 2. */
static inline int read_bytes(Decoder *d, const uint8_t *at, int wire_type, const uint8_t **pp, const uint8_t *end,
                             const uint8_t **data, Py_ssize_t *size) {
    return expect(d, at, wire_type, WT_LEN) || read_len(d, pp, end, data, size) ? -1 : 0;
}

/* A singular message field, [*data, *data_end). Protobuf merges a second occurrence into the
 * first; this decoder leaves that to protobuf (ValueError). */
static int read_once(Decoder *d, const uint8_t *at, int wire_type, const uint8_t **pp, const uint8_t *end,
                     const uint8_t **data, const uint8_t **data_end, const char *twice) {
    Py_ssize_t size;
    if (*data != NULL) return fail(d, at, twice);
    if (read_bytes(d, at, wire_type, pp, end, data, &size)) return -1;
    *data_end = *data + size;
    return 0;
}

/* ---- Python values --------------------------------------------------------------------- */

static PyObject *make_str(Decoder *d, const uint8_t *p, Py_ssize_t n) {
    if (n > CACHE_MAX_LEN) return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    uint32_t hash = 2166136261u; /* FNV-1a */
    uint8_t high = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        hash = (hash ^ p[i]) * 16777619u;
        high |= p[i];
    }
    if (high & 0x80) return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    PyObject **slot = &d->cache[hash & (CACHE_SLOTS - 1)];
    if (*slot != NULL && PyUnicode_GET_LENGTH(*slot) == n && memcmp(PyUnicode_1BYTE_DATA(*slot), p, (size_t)n) == 0) {
        Py_INCREF(*slot);
        return *slot;
    }
    PyObject *s = PyUnicode_New(n, 127);
    if (s == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(s), p, (size_t)n);
    Py_XSETREF(*slot, s);
    Py_INCREF(s);
    return s;
}

static PyObject *str_or_none(Decoder *d, const uint8_t *p, Py_ssize_t n) {
    if (n == 0) Py_RETURN_NONE;
    return make_str(d, p, n);
}

static PyObject *make_hex(const uint8_t *p, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *s = PyUnicode_New(2 * n, 127);
    if (s == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    return s;
}

static inline PyObject *make_bytes(const uint8_t *p, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)p, n);
}

/* A tuple of items[0..n); it takes over the references of items[first..last) (new ones, any
 * of which may be NULL after a failed allocation: the tuple is then not made) and borrows the rest. */
static PyObject *new_tuple(PyObject **items, Py_ssize_t n, Py_ssize_t first, Py_ssize_t last) {
    PyObject *tuple = NULL;
    for (Py_ssize_t i = first; i < last; i++)
        if (items[i] == NULL) goto done;
    if ((tuple = PyTuple_New(n)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i < first || i >= last) Py_INCREF(items[i]);
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;
done:
    for (Py_ssize_t i = first; i < last; i++) Py_XDECREF(items[i]);
    return NULL;
}

/* {keys[i]: values[i]}, taking over the new references values[0..n), any of which may be NULL
 * after a failed allocation or decoding (then no dict is made). */
static PyObject *new_dict(PyObject **keys, PyObject **values, int n) {
    PyObject *dict = NULL;
    for (int i = 0; i < n; i++)
        if (values[i] == NULL) goto done;
    if ((dict = PyDict_New()) == NULL) goto done;
    for (int i = 0; i < n; i++) {
        if (PyDict_SetItem(dict, keys[i], values[i])) {
            Py_CLEAR(dict);
            goto done;
        }
    }
done:
    for (int i = 0; i < n; i++) Py_XDECREF(values[i]);
    return dict;
}

/* ---- AnyValue, KeyValue ------------------------------------------------------------------ */

static int add_key_value(Decoder *d, PyObject *dict, const uint8_t *p, const uint8_t *end, int depth);

static PyObject *decode_any_value(Decoder *d, const uint8_t *p, const uint8_t *end, int depth) {
    if (depth > MAX_DEPTH) return fail(d, p, "values nested too deeply"), NULL;
    uint32_t kind = 0, field;
    int wire_type, seen_message = 0;
    uint64_t scalar = 0;
    const uint8_t *data = NULL;
    Py_ssize_t size = 0;
    while (p < end) {
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type)) return NULL;
        switch (field) {
        case 5: /* array_value */
        case 6: /* kvlist_value: a second one would be merged by protobuf */
            if (seen_message++) return fail(d, at, "AnyValue with two message values"), NULL;
            /* fall through */
        case 1: /* string_value */
        case 7: /* bytes_value */
            if (read_bytes(d, at, wire_type, &p, end, &data, &size)) return NULL;
            break;
        case 2: /* bool_value */
        case 3: /* int_value */
            if (expect(d, at, wire_type, WT_VARINT) || read_varint(d, &p, end, &scalar)) return NULL;
            break;
        case 4: /* double_value */
            if (expect(d, at, wire_type, WT_I64) || read_fixed(d, &p, end, 8, &scalar)) return NULL;
            break;
        default: /* string_value_strindex or a newer kind of value: leave it to protobuf */
            return fail(d, at, "AnyValue field this decoder does not read"), NULL;
        }
        kind = field; /* a oneof: the last member given wins */
    }
    switch (kind) {
    case 0: Py_RETURN_NONE;
    case 1: return make_str(d, data, size);
    case 2: return PyBool_FromLong(scalar != 0);
    case 3: return PyLong_FromLongLong((long long)(int64_t)scalar);
    case 4: {
        double value;
        memcpy(&value, &scalar, sizeof value);
        return PyFloat_FromDouble(value);
    }
    case 7: return make_bytes(data, size);
    case 5: { /* ArrayValue { repeated AnyValue values = 1; } */
        PyObject *list = PyList_New(0);
        if (list == NULL) return NULL;
        const uint8_t *q = data, *q_end = data + size;
        while (q < q_end) {
            const uint8_t *at = q, *item;
            Py_ssize_t item_size;
            if (read_tag(d, &q, q_end, &field, &wire_type)) goto array_error;
            if (field != 1) {
                if (skip_field(d, &q, q_end, wire_type)) goto array_error;
                continue;
            }
            if (read_bytes(d, at, wire_type, &q, q_end, &item, &item_size)) goto array_error;
            PyObject *value = decode_any_value(d, item, item + item_size, depth + 2);
            if (value == NULL) goto array_error;
            int rc = PyList_Append(list, value);
            Py_DECREF(value);
            if (rc) goto array_error;
        }
        return list;
    array_error:
        Py_DECREF(list);
        return NULL;
    }
    case 6: { /* KeyValueList { repeated KeyValue values = 1; } */
        PyObject *dict = PyDict_New();
        if (dict == NULL) return NULL;
        const uint8_t *q = data, *q_end = data + size;
        while (q < q_end) {
            const uint8_t *at = q, *item;
            Py_ssize_t item_size;
            if (read_tag(d, &q, q_end, &field, &wire_type)) goto kvlist_error;
            if (field != 1) {
                if (skip_field(d, &q, q_end, wire_type)) goto kvlist_error;
                continue;
            }
            if (read_bytes(d, at, wire_type, &q, q_end, &item, &item_size)) goto kvlist_error;
            if (add_key_value(d, dict, item, item + item_size, depth + 2)) goto kvlist_error;
        }
        return dict;
    kvlist_error:
        Py_DECREF(dict);
        return NULL;
    }
    }
    return fail(d, p, "internal: unknown AnyValue kind"), NULL;
}

/* KeyValue { string key = 1; AnyValue value = 2; int32 key_strindex = 3; }: its key's bytes and its
 * value's (value NULL when it has none), undecoded. */
static int read_key_value_bytes(Decoder *d, const uint8_t *p, const uint8_t *end, const uint8_t **key_bytes,
                                Py_ssize_t *key_size, const uint8_t **value, const uint8_t **value_end) {
    uint32_t field;
    int wire_type;
    *key_bytes = p;
    *key_size = 0;
    *value = *value_end = NULL;
    while (p < end) {
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type)) return -1;
        if (field == 1) {
            if (read_bytes(d, at, wire_type, &p, end, key_bytes, key_size)) return -1;
        } else if (field == 2) {
            if (read_once(d, at, wire_type, &p, end, value, value_end, "KeyValue with two values")) return -1;
        } else if (skip_field(d, &p, end, wire_type)) {
            return -1;
        }
    }
    return 0;
}

/* A KeyValue read by read_key_value_bytes, made Python: new references to its key and value
 * (None when it has none). */
static int make_key_value(Decoder *d, const uint8_t *key_bytes, Py_ssize_t key_size, const uint8_t *value,
                          const uint8_t *value_end, int depth, PyObject **key_out, PyObject **value_out) {
    if ((*key_out = make_str(d, key_bytes, key_size)) == NULL) return -1;
    if (value == NULL) {
        Py_INCREF(Py_None);
        *value_out = Py_None;
    } else if ((*value_out = decode_any_value(d, value, value_end, depth + 1)) == NULL) {
        Py_CLEAR(*key_out);
        return -1;
    }
    return 0;
}

/* dict[key] = value of a KeyValue: the last of repeated keys wins, at its first position. */
static int add_key_value(Decoder *d, PyObject *dict, const uint8_t *p, const uint8_t *end, int depth) {
    PyObject *key, *value;
    const uint8_t *key_bytes, *value_bytes, *value_end;
    Py_ssize_t key_size;
    if (read_key_value_bytes(d, p, end, &key_bytes, &key_size, &value_bytes, &value_end) ||
        make_key_value(d, key_bytes, key_size, value_bytes, value_end, depth, &key, &value))
        return -1;
    int rc = PyDict_SetItem(dict, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    return rc;
}

/* One KeyValue field of a message into its (lazily made) attribute dict. */
static int add_attribute(Decoder *d, PyObject **dict, const uint8_t *at, const uint8_t **pp, const uint8_t *end,
                         int wire_type) {
    const uint8_t *item;
    Py_ssize_t size;
    if (read_bytes(d, at, wire_type, pp, end, &item, &size)) return -1;
    if (*dict == NULL && (*dict = PyDict_New()) == NULL) return -1;
    return add_key_value(d, *dict, item, item + size, ATTRIBUTE_DEPTH);
}

/* The items of a packed token string as bytes, or NULL without an error when ``value`` is not
 * one in the form this decodes: exactly "<prefix>" + standard base64 in whole quanta (padding
 * only at the end) of a whole number of items. src/tracerl/schemas/tokens.py accepts every such string
 * and decodes it to the same bytes (tests/collector/test_otlp_wire.py checks); anything else is
 * left in the attributes for it to decode or reject. */
static PyObject *unpack(const Packed *packed, PyObject *value) {
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_COMPACT_ASCII(value)) return NULL;
    const uint8_t *s = PyUnicode_1BYTE_DATA(value);
    Py_ssize_t n = PyUnicode_GET_LENGTH(value) - packed->prefix_size;
    if (n < 0 || n % 4 || memcmp(s, packed->prefix, (size_t)packed->prefix_size)) return NULL;
    s += packed->prefix_size;
    Py_ssize_t pad = n && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0, size = n / 4 * 3 - pad;
    if (size % packed->itemsize) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t full = pad ? n - 4 : n; /* whole quanta; a padded one last */
    int bad = 0;
    for (Py_ssize_t i = 0; i < full; i += 4, o += 3) {
        int a = base64_values[s[i]], b = base64_values[s[i + 1]], c = base64_values[s[i + 2]], e = base64_values[s[i + 3]];
        bad |= a | b | c | e; /* negative once any is not in the alphabet */
        uint32_t bits = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)e;
        o[0] = (uint8_t)(bits >> 16);
        o[1] = (uint8_t)(bits >> 8);
        o[2] = (uint8_t)bits;
    }
    if (pad) { /* "xx==" -> 1 byte, "xxx=" -> 2; the bits left over are ignored, as binascii does */
        int a = base64_values[s[full]], b = base64_values[s[full + 1]], c = pad == 1 ? base64_values[s[full + 2]] : 0;
        bad |= a | b | c;
        uint32_t bits = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6;
        o[0] = (uint8_t)(bits >> 16);
        if (pad == 1) o[1] = (uint8_t)(bits >> 8);
    }
    if (bad < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* The items of a token attribute sent as a plain OTel array (what every producer but tracerl's
 * capture sends): ``any_value`` holds an ArrayValue of int_value items in int32 range (kind
 * 'i') or of double_value items within float32 range (kind 'f'), returned as their
 * little-endian int32 / float32 bytes, as decode_array makes them, with no Python object per
 * item. NULL without an error for any other value, malformed ones included: the generic path
 * then decodes it to a list (and decode_array accepts or rejects it, or the request falls back
 * to protobuf, as before). */
static PyObject *plain_items(Decoder *d, const Packed *packed, const uint8_t *p, const uint8_t *end) {
    const uint8_t *array = NULL;
    Py_ssize_t size = 0;
    uint32_t field;
    int wire_type;
    PyObject *out = NULL;
    while (p < end) { /* AnyValue holding array_value (5) alone */
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type) || field != 5 || array != NULL ||
            read_bytes(d, at, wire_type, &p, end, &array, &size))
            goto declined;
    }
    if (array == NULL) return NULL;
    /* every item takes at least 4 bytes on the wire (tag, length, tag, value), so `size` bounds the output */
    if ((out = PyBytes_FromStringAndSize(NULL, size)) == NULL) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *q = array, *q_end = array + size;
    while (q < q_end) { /* ArrayValue { repeated AnyValue values = 1; } */
        const uint8_t *at = q, *item;
        Py_ssize_t item_size;
        uint64_t scalar = 0;
        int seen = 0;
        if (read_tag(d, &q, q_end, &field, &wire_type) || field != 1 || read_bytes(d, at, wire_type, &q, q_end, &item, &item_size))
            goto declined;
        const uint8_t *item_end = item + item_size;
        while (item < item_end) { /* the item's one value field, the same kind throughout */
            if (read_tag(d, &item, item_end, &field, &wire_type)) goto declined;
            if (packed->kind == 'i' ? field != 3 || wire_type != WT_VARINT || read_varint(d, &item, item_end, &scalar)
                                    : field != 4 || wire_type != WT_I64 || read_fixed(d, &item, item_end, 8, &scalar))
                goto declined;
            seen = 1;
        }
        if (!seen) goto declined;
        uint32_t bits;
        if (packed->kind == 'i') {
            int64_t value = (int64_t)scalar;
            if (value < INT32_MIN || value > INT32_MAX) goto declined;
            bits = (uint32_t)(int32_t)value;
        } else {
            double value;
            memcpy(&value, &scalar, sizeof value);
            if (isfinite(value) && fabs(value) > FLT_MAX) goto declined; /* decode_array rejects it */
            float narrow = (float)value;
            memcpy(&bits, &narrow, sizeof bits);
        }
        o[0] = (uint8_t)bits;
        o[1] = (uint8_t)(bits >> 8);
        o[2] = (uint8_t)(bits >> 16);
        o[3] = (uint8_t)(bits >> 24);
        o += 4;
    }
    if (_PyBytes_Resize(&out, o - (uint8_t *)PyBytes_AS_STRING(out))) return NULL;
    return out;
declined:
    Py_XDECREF(out);
    PyErr_Clear(); /* a malformed value: the generic path reads it again and says where */
    return NULL;
}

/* A span attribute. A token array (Decoder.packed) this decodes, packed or plain, goes to
 * tokens[i] as its items' bytes and is not in the dict; anything else goes into the dict. The
 * last of repeated keys wins either way, as in key_values. */
static int add_span_attribute(Decoder *d, PyObject **dict, PyObject **tokens, const uint8_t *at, const uint8_t **pp,
                              const uint8_t *end, int wire_type) {
    const uint8_t *item, *key_bytes, *value_bytes, *value_end;
    Py_ssize_t size, key_size;
    PyObject *key, *value = NULL, *items = NULL;
    if (read_bytes(d, at, wire_type, pp, end, &item, &size)) return -1;
    if (*dict == NULL && (*dict = PyDict_New()) == NULL) return -1;
    if (read_key_value_bytes(d, item, item + size, &key_bytes, &key_size, &value_bytes, &value_end)) return -1;
    int i = 0;
    while (i < d->n_packed && (d->packed[i].key_size != key_size || memcmp(d->packed[i].key, key_bytes, (size_t)key_size)))
        i++;
    if (i < d->n_packed && d->packed[i].kind && value_bytes != NULL) {
        items = plain_items(d, &d->packed[i], value_bytes, value_end);
        if (items == NULL && PyErr_Occurred()) return -1;
    }
    if (items != NULL) {
        if ((key = make_str(d, key_bytes, key_size)) == NULL) {
            Py_DECREF(items);
            return -1;
        }
    } else {
        if (make_key_value(d, key_bytes, key_size, value_bytes, value_end, ATTRIBUTE_DEPTH, &key, &value)) return -1;
        if (i < d->n_packed && (items = unpack(&d->packed[i], value)) == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            Py_DECREF(value);
            return -1;
        }
    }
    int rc;
    if (i < d->n_packed) Py_XSETREF(tokens[i], items); /* NULL too: an earlier value of the key is replaced */
    if (items == NULL) {
        rc = PyDict_SetItem(*dict, key, value);
    } else { /* drop an earlier value of the key */
        rc = PyDict_Contains(*dict, key);
        if (rc > 0) rc = PyDict_DelItem(*dict, key);
    }
    Py_DECREF(key);
    Py_XDECREF(value);
    return rc < 0 ? -1 : 0;
}

static PyObject *dict_or_empty(PyObject *dict) {
    return dict != NULL ? dict : PyDict_New();
}

/* ---- Span.Event, Span.Link ----------------------------------------------------------------- */

/* Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; ... }
 * as {"name", "time_unix_nano", "attributes"} (otlp.span_events). */
static PyObject *decode_event(Decoder *d, const uint8_t *p, const uint8_t *end) {
    const uint8_t *name = p;
    Py_ssize_t name_size = 0;
    uint64_t time = 0;
    PyObject *attributes = NULL;
    uint32_t field;
    int wire_type;
    while (p < end) {
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        switch (field) {
        case 1:
            if (expect(d, at, wire_type, WT_I64) || read_fixed(d, &p, end, 8, &time)) goto done;
            break;
        case 2:
            if (read_bytes(d, at, wire_type, &p, end, &name, &name_size)) goto done;
            break;
        case 3:
            if (add_attribute(d, &attributes, at, &p, end, wire_type)) goto done;
            break;
        default:
            if (skip_field(d, &p, end, wire_type)) goto done;
        }
    }
    PyObject *keys[3] = {s_name, s_time_unix_nano, s_attributes};
    PyObject *values[3] = {make_str(d, name, name_size), NULL, dict_or_empty(attributes)};
    attributes = NULL; /* owned by values[2] now */
    if (values[0] != NULL) values[1] = PyLong_FromUnsignedLongLong(time);
    return new_dict(keys, values, 3);
done:
    Py_XDECREF(attributes);
    return NULL;
}

/* Link { bytes trace_id = 1; bytes span_id = 2; ...; repeated KeyValue attributes = 4; ... }
 * as {"trace_id": hex, "span_id": hex, "attributes"} (otlp.span_links). */
static PyObject *decode_link(Decoder *d, const uint8_t *p, const uint8_t *end) {
    const uint8_t *trace_id = p, *span_id = p;
    Py_ssize_t trace_id_size = 0, span_id_size = 0;
    PyObject *attributes = NULL;
    uint32_t field;
    int wire_type;
    while (p < end) {
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        switch (field) {
        case 1:
            if (read_bytes(d, at, wire_type, &p, end, &trace_id, &trace_id_size)) goto done;
            break;
        case 2:
            if (read_bytes(d, at, wire_type, &p, end, &span_id, &span_id_size)) goto done;
            break;
        case 4:
            if (add_attribute(d, &attributes, at, &p, end, wire_type)) goto done;
            break;
        default:
            if (skip_field(d, &p, end, wire_type)) goto done;
        }
    }
    PyObject *keys[3] = {s_trace_id, s_span_id, s_attributes};
    PyObject *values[3] = {make_hex(trace_id, trace_id_size), make_hex(span_id, span_id_size), dict_or_empty(attributes)};
    return new_dict(keys, values, 3);
done:
    Py_XDECREF(attributes);
    return NULL;
}

/* Append one decoded sub-message (event or link) to *list, made on first use. */
static int append_decoded(Decoder *d, PyObject **list, const uint8_t *at, const uint8_t **pp, const uint8_t *end,
                          int wire_type, PyObject *(*decode)(Decoder *, const uint8_t *, const uint8_t *)) {
    const uint8_t *item;
    Py_ssize_t size;
    if (read_bytes(d, at, wire_type, pp, end, &item, &size)) return -1;
    if (*list == NULL && (*list = PyList_New(0)) == NULL) return -1;
    PyObject *value = decode(d, item, item + size);
    if (value == NULL) return -1;
    int rc = PyList_Append(*list, value);
    Py_DECREF(value);
    return rc;
}

/* ---- Span ------------------------------------------------------------------------------ */

/* An id that otlp.hex_ids accepts as it is: ``size`` bytes, not all zero. */
static int plain_id(const uint8_t *p, Py_ssize_t n, Py_ssize_t size) {
    if (n != size) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i]) return 1;
    return 0;
}

/* Does the span need the collector's own rules (otlp.hex_ids, decode_tokens)? Yes when an
 * id is not plain or a token attribute was left in the attributes. */
static int needs_check(Decoder *d, const uint8_t *trace_id, Py_ssize_t trace_id_size, const uint8_t *span_id,
                       Py_ssize_t span_id_size, PyObject *attributes) {
    if (!plain_id(trace_id, trace_id_size, 16) || !plain_id(span_id, span_id_size, 8)) return 1;
    for (int i = 0; i < d->n_packed; i++) {
        int found = PyDict_Contains(attributes, d->packed[i].key_str);
        if (found) return found; /* 1, or -1 on an error */
    }
    return 0;
}

/* Appends one span to Decoder.spans. */
static int decode_span(Decoder *d, const uint8_t *p, const uint8_t *end, PyObject *scope_index) {
    const uint8_t *trace_id = p, *span_id = p, *parent = p, *name = p, *status = NULL, *status_end = NULL;
    const uint8_t *message = p;
    Py_ssize_t trace_id_size = 0, span_id_size = 0, parent_size = 0, name_size = 0, message_size = 0;
    uint64_t kind = 0, start = 0, stop = 0, code = 0;
    PyObject *attributes = NULL, *events = NULL, *links = NULL, *tokens[MAX_PACKED] = {NULL};
    uint32_t field;
    int wire_type, rc = -1;
    while (p < end) {
        const uint8_t *at = p;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        switch (field) {
        case 1:
            if (read_bytes(d, at, wire_type, &p, end, &trace_id, &trace_id_size)) goto done;
            break;
        case 2:
            if (read_bytes(d, at, wire_type, &p, end, &span_id, &span_id_size)) goto done;
            break;
        case 4:
            if (read_bytes(d, at, wire_type, &p, end, &parent, &parent_size)) goto done;
            break;
        case 5:
            if (read_bytes(d, at, wire_type, &p, end, &name, &name_size)) goto done;
            break;
        case 6:
            if (expect(d, at, wire_type, WT_VARINT) || read_varint(d, &p, end, &kind)) goto done;
            break;
        case 7:
            if (expect(d, at, wire_type, WT_I64) || read_fixed(d, &p, end, 8, &start)) goto done;
            break;
        case 8:
            if (expect(d, at, wire_type, WT_I64) || read_fixed(d, &p, end, 8, &stop)) goto done;
            break;
        case 9:
            if (add_span_attribute(d, &attributes, tokens, at, &p, end, wire_type)) goto done;
            break;
        case 11:
            if (append_decoded(d, &events, at, &p, end, wire_type, decode_event)) goto done;
            break;
        case 13:
            if (append_decoded(d, &links, at, &p, end, wire_type, decode_link)) goto done;
            break;
        case 15:
            if (read_once(d, at, wire_type, &p, end, &status, &status_end, "Span with two statuses")) goto done;
            break;
        default: /* trace_state, flags, dropped counts, newer fields */
            if (skip_field(d, &p, end, wire_type)) goto done;
        }
    }
    if (status != NULL) { /* Status { string message = 2; StatusCode code = 3; } */
        const uint8_t *q = status;
        while (q < status_end) {
            const uint8_t *at = q;
            if (read_tag(d, &q, status_end, &field, &wire_type)) goto done;
            if (field == 2) {
                if (read_bytes(d, at, wire_type, &q, status_end, &message, &message_size)) goto done;
            } else if (field == 3) {
                if (expect(d, at, wire_type, WT_VARINT) || read_varint(d, &q, status_end, &code)) goto done;
            } else if (skip_field(d, &q, status_end, wire_type)) {
                goto done;
            }
        }
    }
    if ((attributes = dict_or_empty(attributes)) == NULL) goto done;
    /* none: the (shared) empty tuple, not a new list the garbage collector would track */
    if (events == NULL && (events = PyTuple_New(0)) == NULL) goto done;
    if (links == NULL && (links = PyTuple_New(0)) == NULL) goto done;
    /* enums are int32 on the wire: protobuf keeps the low 32 bits of the varint */
    /* the two values that can fail on their content (UTF-8) first: nothing runs with an error set */
    PyObject *name_str = make_str(d, name, name_size), *message_str = NULL;
    if (name_str == NULL || (message_str = str_or_none(d, message, message_size)) == NULL) {
        Py_XDECREF(name_str);
        goto done;
    }
    int check = needs_check(d, trace_id, trace_id_size, span_id, span_id_size, attributes);
    if (check < 0) {
        Py_DECREF(name_str);
        Py_DECREF(message_str);
        goto done;
    }
    if (check) {
        PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(d->spans[0]));
        if (index == NULL || PyList_Append(d->check, index)) {
            Py_XDECREF(index);
            Py_DECREF(name_str);
            Py_DECREF(message_str);
            goto done;
        }
        Py_DECREF(index);
    }
    PyObject *parent_hex = parent_size ? make_hex(parent, parent_size) : (Py_INCREF(Py_None), Py_None);
    PyObject *items[SPAN_FIELDS + MAX_PACKED] = {
        scope_index, make_hex(trace_id, trace_id_size), make_hex(span_id, span_id_size),
        parent_hex, name_str, PyLong_FromLong((int32_t)(uint32_t)kind),
        PyLong_FromUnsignedLongLong(start), PyLong_FromUnsignedLongLong(stop),
        PyLong_FromLong((int32_t)(uint32_t)code), message_str, attributes, events, links,
    };
    for (int i = 0; i < d->n_packed; i++) items[SPAN_FIELDS + i] = tokens[i] != NULL ? tokens[i] : Py_None;
    for (int i = 1; i < 10; i++) /* the new ones */
        if (items[i] == NULL) {
            for (int j = 1; j < 10; j++) Py_XDECREF(items[j]);
            goto done;
        }
    rc = 0;
    for (int i = 0; i < SPAN_FIELDS + d->n_packed; i++) {
        if (rc == 0) rc = PyList_Append(d->spans[i], items[i]);
        if (i >= 1 && i < 10) Py_DECREF(items[i]);
    }
done:
    Py_XDECREF(attributes);
    Py_XDECREF(events);
    Py_XDECREF(links);
    for (int i = 0; i < d->n_packed; i++) Py_XDECREF(tokens[i]);
    return rc;
}

/* ---- ScopeSpans, ResourceSpans, the request -------------------------------------------------- */

/* ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; } */
static int decode_scope_spans(Decoder *d, const uint8_t *p, const uint8_t *end, PyObject *resource_index,
                              PyObject *scopes) {
    const uint8_t *scope = NULL, *scope_end = NULL, *name = p, *version = p;
    Py_ssize_t name_size = 0, version_size = 0;
    uint32_t field;
    int wire_type, rc = -1;
    PyObject *scope_index = PyLong_FromSsize_t(PyList_GET_SIZE(scopes)), *entry = NULL;
    if (scope_index == NULL) return -1;
    while (p < end) {
        const uint8_t *at = p, *item;
        Py_ssize_t size;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        if (field == 1) {
            if (read_once(d, at, wire_type, &p, end, &scope, &scope_end, "ScopeSpans with two scopes")) goto done;
        } else if (field == 2) {
            if (read_bytes(d, at, wire_type, &p, end, &item, &size)) goto done;
            if (decode_span(d, item, item + size, scope_index)) goto done;
        } else if (skip_field(d, &p, end, wire_type)) {
            goto done;
        }
    }
    /* InstrumentationScope { string name = 1; string version = 2; attributes = 3 (not stored); ... } */
    for (const uint8_t *q = scope; q != NULL && q < scope_end;) {
        const uint8_t *at = q;
        if (read_tag(d, &q, scope_end, &field, &wire_type)) goto done;
        if (field == 1) {
            if (read_bytes(d, at, wire_type, &q, scope_end, &name, &name_size)) goto done;
        } else if (field == 2) {
            if (read_bytes(d, at, wire_type, &q, scope_end, &version, &version_size)) goto done;
        } else if (skip_field(d, &q, scope_end, wire_type)) {
            goto done;
        }
    }
    PyObject *items[3] = {resource_index, str_or_none(d, name, name_size), NULL};
    if (items[1] != NULL) items[2] = str_or_none(d, version, version_size);
    if ((entry = new_tuple(items, 3, 1, 3)) != NULL) rc = PyList_Append(scopes, entry);
done:
    Py_XDECREF(entry);
    Py_DECREF(scope_index);
    return rc;
}

/* ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; } */
static int decode_resource_spans(Decoder *d, const uint8_t *p, const uint8_t *end, PyObject *resources,
                                 PyObject *scopes) {
    const uint8_t *resource = NULL, *resource_end = NULL;
    uint32_t field;
    int wire_type, rc = -1;
    PyObject *resource_index = PyLong_FromSsize_t(PyList_GET_SIZE(resources)), *attributes = NULL;
    if (resource_index == NULL) return -1;
    while (p < end) {
        const uint8_t *at = p, *item;
        Py_ssize_t size;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        if (field == 1) {
            if (read_once(d, at, wire_type, &p, end, &resource, &resource_end, "ResourceSpans with two resources")) goto done;
        } else if (field == 2) {
            if (read_bytes(d, at, wire_type, &p, end, &item, &size)) goto done;
            if (decode_scope_spans(d, item, item + size, resource_index, scopes)) goto done;
        } else if (skip_field(d, &p, end, wire_type)) {
            goto done;
        }
    }
    /* Resource { repeated KeyValue attributes = 1; dropped_attributes_count = 2; entity_refs = 3; } */
    for (const uint8_t *q = resource; q != NULL && q < resource_end;) {
        const uint8_t *at = q;
        if (read_tag(d, &q, resource_end, &field, &wire_type)) goto done;
        if (field == 1) {
            if (add_attribute(d, &attributes, at, &q, resource_end, wire_type)) goto done;
        } else if (skip_field(d, &q, resource_end, wire_type)) {
            goto done;
        }
    }
    if ((attributes = dict_or_empty(attributes)) != NULL) rc = PyList_Append(resources, attributes);
done:
    Py_XDECREF(attributes);
    Py_DECREF(resource_index);
    return rc;
}

/* The packed token attributes to unpack: ((key, prefix, item size), ...), from Python. */
static int read_packed(Decoder *d, PyObject *packed) {
    if (!PyTuple_Check(packed) || PyTuple_GET_SIZE(packed) > MAX_PACKED) {
        PyErr_SetString(PyExc_TypeError, "packed must be a tuple of at most 8 (key, prefix, item size) tuples");
        return -1;
    }
    d->n_packed = (int)PyTuple_GET_SIZE(packed);
    for (int i = 0; i < d->n_packed; i++) {
        Packed *p = &d->packed[i];
        PyObject *key, *prefix;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(packed, i), "UUn", &key, &prefix, &p->itemsize)) return -1;
        p->key_str = key;
        if ((p->key = PyUnicode_AsUTF8AndSize(key, &p->key_size)) == NULL ||
            (p->prefix = PyUnicode_AsUTF8AndSize(prefix, &p->prefix_size)) == NULL)
            return -1;
        if (p->itemsize <= 0) {
            PyErr_SetString(PyExc_ValueError, "item size must be positive");
            return -1;
        }
        p->kind = 0;
        if (p->itemsize == 4 && p->prefix_size >= 3 && !memcmp(p->prefix + p->prefix_size - 2, "4:", 2) &&
            (p->prefix[p->prefix_size - 3] == 'i' || p->prefix[p->prefix_size - 3] == 'f'))
            p->kind = p->prefix[p->prefix_size - 3];
    }
    return 0;
}

static PyObject *decode_trace_request(PyObject *module, PyObject *args) {
    Py_buffer body;
    PyObject *packed, *resources = NULL, *scopes = NULL, *spans = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O", &body, &packed)) return NULL;
    Decoder *d = PyMem_Calloc(1, sizeof(Decoder));
    if (d == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_packed(d, packed)) goto done;
    int n_columns = SPAN_FIELDS + d->n_packed;
    for (int i = 0; i < n_columns; i++)
        if ((d->spans[i] = PyList_New(0)) == NULL) goto done;
    if ((resources = PyList_New(0)) == NULL || (scopes = PyList_New(0)) == NULL || (d->check = PyList_New(0)) == NULL)
        goto done;
    d->start = body.buf;
    const uint8_t *p = body.buf, *end = p + body.len;
    while (p < end) { /* ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; } */
        const uint8_t *at = p, *item;
        Py_ssize_t size;
        uint32_t field;
        int wire_type;
        if (read_tag(d, &p, end, &field, &wire_type)) goto done;
        if (field == 1) {
            if (read_bytes(d, at, wire_type, &p, end, &item, &size)) goto done;
            if (decode_resource_spans(d, item, item + size, resources, scopes)) goto done;
        } else if (skip_field(d, &p, end, wire_type)) {
            goto done;
        }
    }
    if ((spans = PyTuple_New(n_columns)) == NULL) goto done;
    for (int i = 0; i < n_columns; i++) {
        PyTuple_SET_ITEM(spans, i, d->spans[i]);
        d->spans[i] = NULL;
    }
    result = PyTuple_Pack(4, resources, scopes, spans, d->check);
done:
    if (d != NULL) {
        for (int i = 0; i < CACHE_SLOTS; i++) Py_XDECREF(d->cache[i]);
        for (int i = 0; i < SPAN_FIELDS + MAX_PACKED; i++) Py_XDECREF(d->spans[i]);
        Py_XDECREF(d->check);
        PyMem_Free(d);
    }
    Py_XDECREF(resources);
    Py_XDECREF(scopes);
    Py_XDECREF(spans);
    PyBuffer_Release(&body);
    return result;
}

/* promote_columns(attributes, rules) -> [column values, ...]: schemas.spans.promote of every
 * span, column by column. rules is PROMOTED_ATTRIBUTES, ((column, keys, cast), ...): for each
 * span the value is cast(attributes[key]) for the first of keys present, else None. The rules
 * and the casts stay in Python; this only saves the interpreter's loop over spans and keys. */
static PyObject *promote_columns(PyObject *module, PyObject *args) {
    PyObject *attributes, *rules, *spans = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "OO!", &attributes, &PyTuple_Type, &rules)) return NULL;
    /* a tuple of its own: the casts run Python code, which must not pull the items away */
    if ((spans = PySequence_Tuple(attributes)) == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(spans), n_rules = PyTuple_GET_SIZE(rules);
    PyObject **items = PySequence_Fast_ITEMS(spans); /* of a tuple: its item array */
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyDict_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "attributes must be a sequence of dicts");
            goto done;
        }
    if ((result = PyList_New(n_rules)) == NULL) goto done;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        PyObject *column_name, *keys, *cast;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(rules, r), "OO!O", &column_name, &PyTuple_Type, &keys, &cast)) goto fail;
        PyObject *column = PyList_New(n);
        if (column == NULL) goto fail;
        PyList_SET_ITEM(result, r, column);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *value = NULL;
            for (Py_ssize_t k = 0; value == NULL && k < PyTuple_GET_SIZE(keys); k++) {
                value = PyDict_GetItemWithError(items[i], PyTuple_GET_ITEM(keys, k)); /* borrowed */
                if (value == NULL && PyErr_Occurred()) goto fail;
            }
            PyObject *cast_value;
            if (value != NULL) {
                Py_INCREF(value); /* borrowed from the dict, which the cast could change */
                cast_value = PyObject_CallOneArg(cast, value);
                Py_DECREF(value);
            } else {
                Py_INCREF(Py_None);
                cast_value = Py_None;
            }
            if (cast_value == NULL) goto fail;
            PyList_SET_ITEM(column, i, cast_value);
        }
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_DECREF(spans);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_trace_request", decode_trace_request, METH_VARARGS,
     "decode_trace_request(body, packed) -> (resources, scopes, spans, check) of a protobuf ExportTraceServiceRequest.\n\n"
     "packed: ((attribute key, packed prefix, item size), ...) of token attributes to unpack.\n"
     "Raises ValueError for anything it does not reproduce exactly; see tracerl.collector.otlp.trace_records."},
    {"promote_columns", promote_columns, METH_VARARGS,
     "promote_columns(attributes, PROMOTED_ATTRIBUTES) -> [values of each promoted column]: "
     "tracerl.schemas.spans.promote of every span, column by column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tracerl.collector._otlp_wire",
    "OTLP trace requests decoded from the protobuf wire format (the collector's fast path).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__otlp_wire(void) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(base64_values, -1, sizeof base64_values);
    for (int i = 0; i < 64; i++) base64_values[(uint8_t)alphabet[i]] = (signed char)i;
    if ((s_name = PyUnicode_InternFromString("name")) == NULL ||
        (s_time_unix_nano = PyUnicode_InternFromString("time_unix_nano")) == NULL ||
        (s_attributes = PyUnicode_InternFromString("attributes")) == NULL ||
        (s_trace_id = PyUnicode_InternFromString("trace_id")) == NULL ||
        (s_span_id = PyUnicode_InternFromString("span_id")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
