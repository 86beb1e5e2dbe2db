/*
 * accelrt spec: the YAML job description, parsed with libyaml and validated
 * against one schema table (runtime/spec/schema.c), which is also the source
 * of the job-file reference (docs/job-file.md, `accelrt schema`).
 *
 * Every error names FILE:LINE:COL and the key path, and all errors of a
 * file are reported, not only the first.  Command-line overrides
 * (`--set key.path=value`) are applied to the parsed tree before
 * validation, so they are checked exactly like the file.
 *
 * Tests: tests/spec/test_spec.c; fuzzing: tests/fuzz/fuzz_spec.c.
 */
#ifndef ACCELRT_SPEC_H
#define ACCELRT_SPEC_H

#include "accelrt/base.h"
#include "accelrt/data.h"   /* ar_data_format, ar_gen_spec */
#include "accelrt/device.h" /* ar_act */
#include "accelrt/nn.h"     /* ar_nn_attr: graph models' items */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif


typedef enum ar_opt_kind { AR_OPT_ADAM = 0, AR_OPT_SGD } ar_opt_kind;

typedef enum ar_init_kind {
  AR_INIT_AUTO = 0, /* He for relu layers, Xavier otherwise */
  AR_INIT_HE,
  AR_INIT_XAVIER
} ar_init_kind;

/* Where a value came from, for messages that point at it. */
typedef struct ar_srcpos {
  int line, col; /* 1-based; 0 when the value came from a default */
} ar_srcpos;

/* layers[].sparse: LSH-sampled execution of a layer (SLIDE; lsh/). */
typedef enum ar_sparse_mode {
  AR_SPARSE_NONE = 0, /* no `sparse` key: the layer is dense */
  AR_SPARSE_DENSE,    /* sparse: {mode: dense}: dense, settings kept */
  AR_SPARSE_LSH,      /* always LSH-sampled (host devices only) */
  AR_SPARSE_AUTO      /* sampled on a host device when wide enough */
} ar_sparse_mode;

/* By position, the same order as ar_lsh_family in accelrt/lsh.h. */
typedef enum ar_sparse_hash {
  AR_HASH_SRP = 0,
  AR_HASH_WTA,
  AR_HASH_DWTA,
  AR_HASH_DOPH
} ar_sparse_hash;

/* By position, the same order as ar_lsh_strategy in accelrt/lsh.h. */
typedef enum ar_sparse_sampling {
  AR_SAMPLE_UNION = 0,
  AR_SAMPLE_TOPK,
  AR_SAMPLE_THRESHOLD
} ar_sparse_sampling;

typedef struct ar_sparse_spec {
  ar_sparse_mode mode;
  ar_sparse_hash hash;
  int32_t K, L;         /* codes per table (0: from the width, see
                           ar_sparse_auto_K), tables */
  int32_t bucket;       /* ids per bucket */
  bool reservoir;       /* insertion policy: false FIFO, true reservoir */
  ar_sparse_sampling sampling;
  double active;        /* fraction of the width retrieved per sample, (0, 1] */
  int32_t min_active;   /* top up to this many with random neurons;
                           -1 (not given): to the budget */
  int32_t max_active;   /* 0: no limit besides `active` */
  int32_t negatives;    /* uniform random negatives a batch always draws
                           (an output layer on a dense input); -1 (not
                           given): ar_layer_negatives' default */
  int8_t correction;    /* 1 logq, 0 none, -1 (not given): logq on a
                           graph model's head, none on a chain */
  int64_t catch_up;     /* sparse Adam makes a row's skipped steps'
                           moves at its next update for the first this
                           many iterations (ar_lsh_adam_opts); 0 (the
                           default): lazy throughout */
  int32_t rescore;      /* > 1: rescore times the budget retrieved, the
                           budget with the highest outputs kept; 0, 1: off */
  int32_t threshold;    /* sampling: threshold: tables an id must be in */
  int64_t rehash_every; /* first table rebuild after this many iterations */
  double rehash_growth; /* each gap times this */
  int64_t new_hash_every; /* new hash functions every N iterations; 0 never */
  int64_t auto_min_width; /* mode auto: sampled from this width on */
} ar_sparse_spec;

typedef struct ar_layer_spec {
  char *name;     /* unique within the model */
  int64_t width;  /* output neurons ("dense: N") */
  ar_act act;
  ar_sparse_spec sparse; /* mode AR_SPARSE_NONE without a `sparse` key */
  ar_srcpos pos;  /* the list item; 0 when the layer came from a --set */
  /* Graph models (runtime/engine/net*.c; ar_spec.graph): */
  int op;          /* ar_nn_op: `dense` DENSE, `conv` CONV2D, `op: NAME`;
                      -1 for a `repeat` item */
  ar_nn_attr attr; /* from the item's keys over ar_nn_attr_defaults; act
                      and out set from `activation` and `dense`/`conv`/
                      `width` */
  int n_inputs;    /* `inputs`: names of earlier items (0: the previous) */
  char **inputs;
  int64_t repeat;  /* `repeat` (1 otherwise) */
  int n_block;     /* `block`: the items repeated */
  struct ar_layer_spec *block;
  bool graph_only; /* uses a key only graph models have (op, conv,
                      inputs, repeat) */
} ar_layer_spec;

/* model.input's kind. */
typedef enum ar_input_kind {
  AR_INPUT_SPARSE = 0,
  AR_INPUT_DENSE,
  AR_INPUT_IMAGE,  /* image: [C, H, W] */
  AR_INPUT_TOKENS  /* tokens: T, vocab: V */
} ar_input_kind;

/* runtime.policy: the lane scheduler's policy (lanes/).  One table: the
 * enum, the names job files use (which are also the lanes' policy names,
 * lanes/policies.c; tests/spec checks that lanes knows each), and the
 * accessors below. */
#define AR_POLICY_MAP(X)                                                       \
  X(FIFO, "fifo")                                                              \
  X(PACK, "pack")                                                              \
  X(SRTF, "srtf")                                                              \
  X(FAIR, "fair")                                                              \
  X(PRIORITY, "priority")

typedef enum ar_policy_kind {
#define AR__POLICY_ENUM(name, text) AR_POLICY_##name,
  AR_POLICY_MAP(AR__POLICY_ENUM)
#undef AR__POLICY_ENUM
      AR_POLICY_COUNT
} ar_policy_kind;

/* distributed.order (commsched/). */
typedef enum ar_order_kind {
  AR_ORDER_NONE = 0,
  AR_ORDER_RANDOM,
  AR_ORDER_TIC,
  AR_ORDER_TAC
} ar_order_kind;

/* distributed.share_tenants (runtime/dist/share.c). */
typedef enum ar_share_tenants {
  AR_SHARE_ONCE = 0, /* each co-tenant runs its iterations once */
  AR_SHARE_STEADY    /* they restart until the worker's job ends */
} ar_share_tenants;

/* data.generate: a synthetic XC dataset with planted structure written by
 * the runtime before training (see include/accelrt/data.h). */
typedef struct ar_spec {
  char *file; /* path of the job file as given ("<string>" when parsed from memory) */
  char *name;
  char *device; /* "auto", "host" or "cuda:N" */
  uint64_t seed;

  struct {
    bool sparse;      /* model.input: {sparse: N} or {dense: N} */
    int64_t features; /* N; image: C*H*W; tokens: T */
    ar_input_kind kind;
    int64_t image[3]; /* C, H, W */
    int64_t vocab;    /* tokens */
  } input;
  /* A graph model (runtime/engine/net*.c): the input is an image or
   * tokens, an item uses a graph-only key, or the data is idx or npy.
   * Otherwise the chain of dense (or sampled) layers of ar_model. */
  bool graph;
  /* A chain of model.layers routed to the graph engine (graph set too;
   * runtime/engine/net_lower.c): its checkpoints keep the chain's names,
   * order and shapes, its export is the chain's. */
  bool lowered;
  /* model.onnx: an ONNX model file (include/accelrt/onnx.h), resolved like
   * the data paths; then there are no layers (n_layers 0), the model's
   * initializers are the initial parameters and the loss is softmax
   * cross-entropy (model.loss). */
  char *onnx;
  /* model.sparse with onnx: the imported node named `name` (its last
   * Gemm, producing the logits) is LSH-sampled by `sparse`, as a written
   * layer's section; width 0 (the graph gives it), act softmax. */
  int n_onnx_sparse;
  ar_layer_spec *onnx_sparse;
  /* model.loss: sigmoid_bce (model.onnx only): one sigmoid cross-entropy
   * per class against multi-hot targets (y.npy of shape (N, C)); false:
   * softmax_ce against class ids. */
  bool bce;
  int n_layers;
  ar_layer_spec *layers; /* (n_layers); the last one is the output layer */

  struct {
    char *train; /* resolved: relative to the job file's folder when given in
                    the file, relative to the working directory from --set;
                    NULL when generate is set */
    char *test;  /* may be NULL: then no test evaluation */
    ar_data_format format;
    bool generate;   /* data.generate given */
    ar_gen_spec gen; /* valid when generate */
    int64_t shuffle_window; /* rows shuffled together while streaming; 0 = file order */
    char *train_labels, *test_labels; /* idx: NULL by the naming rule */
    bool normalize;   /* images: per-channel, from the training split */
    int64_t crop_pad; /* augment */
    bool flip;
  } data;

  struct {
    int32_t batch;
    int64_t epochs;     /* 0 when only iterations is given */
    int64_t iterations; /* 0 when only epochs is given; both: stop at the first reached */
    int32_t threads;    /* 0 = all cores */
    ar_opt_kind optimizer;
    double lr;
    double momentum;             /* sgd */
    double beta1, beta2, eps;    /* adam */
    double weight_decay;
    bool decoupled;              /* adam: AdamW (graph models) */
    ar_init_kind init;
    int64_t eval_every;       /* iterations; 0 = only at the end */
    int64_t eval_points;      /* at most this many test points per evaluation; 0 = all */
    int64_t checkpoint_every; /* iterations; 0 = only at the end */
    int64_t log_every;        /* graph models: train lines */
    struct {
      int kind;               /* 0 constant, 1 step, 2 cosine */
      int64_t warmup, step_every;
      double gamma, min_lr;
    } schedule;
  } train;

  struct {
    char *dir; /* relative to the working directory */
  } output;

  /* runtime: how the jobs of this file share a device (lanes/).  Given or
   * not, every field holds its default. */
  struct {
    ar_policy_kind policy;   /* default fifo */
    uint64_t memory_bytes;   /* "memory: 8GiB"; 0 when given as a fraction */
    double memory_fraction;  /* "memory: 90%" as 0.9; 0 when given in bytes;
                                both 0: the device's whole free memory */
    double poisson_mean_s;   /* > 0: jobs without arrival arrive as a
                                Poisson process with this mean gap */
  } runtime;

  /* distributed: parameter-server training over MPI (commsched/). */
  struct {
    bool enabled;            /* the `distributed` key is present */
    int32_t servers;         /* ranks 0..servers-1 are servers; default 1 */
    ar_order_kind order;     /* default tac */
    int32_t trace_iterations; /* default 3 */
    double link_gbps;        /* 0: no link emulation */
    double link_latency_us;
    int64_t max_bytes_in_flight; /* per channel; 0: no bound */
    char *schedule_file;     /* read the schedule from / write it to; NULL */
    /* distributed.share: a file with `jobs:` whose jobs share each
     * worker's host device with it through lanes (runtime/dist/share.c);
     * NULL: workers have their devices to themselves. */
    char *share_file;
    ar_share_tenants share_tenants; /* default once */
    /* distributed.workers: settings of the first n_workers workers (the
     * others: device NULL, dense false). */
    int n_workers;
    struct ar_worker_spec {
      char *device; /* "auto", "host", "cuda:N"; NULL: the job's device */
      bool dense;   /* sparse: dense: every layer dense on this worker */
    } *workers;     /* (n_workers) */
  } distributed;

  /* A job of a multi-job file (an item of `jobs:`). */
  double arrival_s;  /* seconds after the run starts; 0 for a single job */
  int32_t priority;  /* policy priority: higher first; default 0 */

  /* jobs: a multi-job file.  Each item is a complete ar_spec (its own name,
   * model, data, train, output, arrival, priority; runtime, device and
   * distributed copied from the top level).  When n_jobs > 0 the top-level
   * model/layers/data/train are empty and output.dir is the folder of the
   * run's summary (jobs default to output.dir/<job name>). */
  int n_jobs;
  struct ar_spec **jobs;

  /* The job as it will run, as a job file (YAML text, owned): the keys
   * written after every --set, in the schema's order, with the table's
   * defaults filled in and data paths absolute (runtime/spec/resolved.c).
   * Parsing it gives this spec again.  A job of `jobs:` holds a job file
   * of its own (its model, data, train, name, seed, folder, the file's
   * device).  `accelrt run` writes it as output.dir/job.resolved.yaml;
   * NULL in a spec not made by ar_spec_parse. */
  char *resolved;
} ar_spec;

/* One diagnostic: "FILE:LINE:COL: error: KEY.PATH: message".  A problem in
 * a command-line override has `set` non-NULL and line = col = -1; it is
 * printed as "--set KEY.PATH=VALUE: error: KEY.PATH: message". */
typedef struct ar_diag {
  int line, col;  /* 1-based; 0 when not tied to a place; -1 for an override */
  char *path;     /* key path such as "train.batch" or "model.layers[1].dense";
                     NULL for problems of the file as a whole (YAML syntax) */
  char *message;
  char *set;      /* the override "KEY.PATH=VALUE" as given (control
                     characters escaped), or NULL */
} ar_diag;

typedef struct ar_diags {
  int count;
  ar_diag *items;
} ar_diags;

/* Prints every diagnostic as "FILE:LINE:COL: error: KEY.PATH: message" (or
 * "FILE: error: ..." when it has no position, "--set KEY.PATH=VALUE: error:
 * ..." for an override), one per line.  `file` NULL prints "<string>". */
void ar_diags_print(const ar_diags *d, const char *file, FILE *to);
/* Frees the diagnostics and leaves *d empty.  NULL is a no-op. */
void ar_diags_fini(ar_diags *d);

/* Appends one diagnostic about a place in a file (line, col 1-based; 0
 * when it has none) with the key path (NULL: none) and a printf-formatted
 * message; strings are copied.  For modules that check their own YAML
 * files (see ar_yaml_load).  AR_OK or AR_NOMEM. */
ar_status ar_diags_add(ar_diags *d, int line, int col, const char *path,
                       const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Orders the diagnostics as ar_spec_load reports them: overrides first,
 * then by place in the file, then those without a place; ties keep their
 * order.  Left as they are when out of memory (the order is a nicety). */
void ar_diags_sort(ar_diags *d);

/* Parses and validates the job file at `path`, applies the `n_sets`
 * overrides "key.path=value" (value is parsed as YAML, so
 * `model.input={sparse: 100}` works; list items are addressed by index
 * "model.layers[1].dense" / "model.layers.1.dense" or by layer name
 * "model.layers.out.dense", an unnamed layer by its default name
 * "model.layers.layer0.dense"), and checks that data files exist.
 *
 * On success returns AR_OK and *out (free with ar_spec_destroy).  On a
 * file or validation problem returns AR_SPEC with *out NULL and every
 * problem in diags (caller frees with ar_diags_fini).  AR_IO when the file
 * cannot be read (also reported in diags).  AR_NOMEM. */
ar_status ar_spec_load(const char *path, const char *const *sets, int n_sets,
                       ar_spec **out, ar_diags *diags);

/* Notes that hold for ar_spec_load and ar_spec_parse:
 *  - *diags is overwritten, not appended to (it need not be initialised);
 *    it receives diagnostics in file order (overrides first) even when
 *    the status is AR_OK (then it is empty).  diags may be NULL.
 *  - Job files larger than AR_SPEC_MAX_BYTES are refused (AR_SPEC).
 *  - A job file is parsed with anchors, aliases, tags and several
 *    documents refused, nesting and size bounded: any byte input is safe.
 *  - Reentrant: no global state; several threads may parse at once.
 *  - AR_INVALID when out is NULL, text is NULL with len > 0, or n_sets < 0
 *    (or > 0 with sets NULL). */
#define AR_SPEC_MAX_BYTES (1u << 20)

/* As ar_spec_load on text in memory (len bytes, need not be NUL-terminated).
 * `file` names it in messages; relative data paths resolve against
 * `base_dir` (NULL: the working directory).  When check_files is false,
 * data files are not required to exist (used by the fuzzer and tests). */
ar_status ar_spec_parse(const char *text, size_t len, const char *file,
                        const char *base_dir, const char *const *sets,
                        int n_sets, bool check_files, ar_spec **out,
                        ar_diags *diags);

/* Frees a spec and everything in it.  NULL is a no-op. */
void ar_spec_destroy(ar_spec *spec);

/* Records an error at one of the job file's items and returns status, as
 * ar_errf: "FILE:LINE:COL: error: PATH: MSG" when pos knows the item's
 * place (line > 0), "FILE: error: PATH: MSG" when it does not (an item
 * given by --set); FILE is spec->file, or "<string>" for a parsed text.
 * The engines' refusals of a layer's settings all read this way. */
ar_status ar_spec_item_errf(const ar_spec *spec, const ar_srcpos *pos, const char *path,
                            ar_err *err, ar_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* The same with the message's arguments as a va_list (for callers that
 * take their own format, as the graph builder's error helper does). */
ar_status ar_spec_item_verrf(const ar_spec *spec, const ar_srcpos *pos, const char *path,
                             ar_err *err, ar_status status, const char *fmt, va_list ap);

/* Writes the job-file reference, generated from the schema table, as
 * Markdown.  docs/job-file.md is this output (a test keeps them equal). */
void ar_spec_schema_markdown(FILE *to);

/* Writes the same table as a JSON Schema (draft-07) of job files, for
 * editors (runtime/spec/schema_json.c): types, ranges, enums, defaults,
 * required keys, no unknown keys, each key's sentences as its
 * description.  docs/job-file.schema.json is this output (a test keeps
 * them equal).  AR_OK, AR_NOMEM, or AR_IO when writing fails. */
ar_status ar_spec_schema_json(FILE *to);

/* The codes per table a sampled layer of `width` neurons gets when its K
 * is not given: about log2(width / 16) bits of table index, one bit per
 * SRP code, three per WTA/DWTA/DOPH code (bin size 8). */
int ar_sparse_auto_K(ar_sparse_hash hash, int64_t width);

/* ---- the schema language, for other modules' YAML files ------------------
 *
 * A job file is checked against a table of ar_schema entries
 * (runtime/spec/schema.c).  Another module describes its own YAML file in
 * the same language and has it checked by the same code, with the same
 * "FILE:LINE:COL: error: KEY.PATH: message" diagnostics: ar_yaml_load reads
 * the file into a tree of ar_ynode, ar_schema_check checks a node against
 * an entry, ar_schema_get reads a checked value or the entry's default, and
 * the module adds diagnostics of its own with ar_diags_add.
 * runtime/study/study_file.c reads study files this way;
 * tests/spec/test_spec.c checks the interface on a small table. */

typedef enum ar_schema_type {
  AR_SCHEMA_MAP = 0, /* mapping with the keys listed in kids */
  AR_SCHEMA_LIST,    /* list; every item follows kids[0] */
  AR_SCHEMA_VARIANT, /* a kid's key as a string (that kid with its defaults),
                        or a mapping with exactly one of the (two) kids */
  AR_SCHEMA_STRING,  /* any text without NUL characters */
  AR_SCHEMA_NAME,    /* non-empty string without '/', control characters */
  AR_SCHEMA_PATH,    /* non-empty file path; resolved by the reader */
  AR_SCHEMA_INT,     /* whole decimal number within [imin, imax] */
  AR_SCHEMA_FLOAT,   /* finite decimal number within the float range */
  AR_SCHEMA_ENUM,    /* one of values */
  AR_SCHEMA_DEVICE,  /* "auto", "host" or "cuda:N" */
  AR_SCHEMA_SIZE,    /* bytes with a unit ("8GiB", "512MiB", "1000000") or a
                        percentage ("90%"): value.i bytes, or value.f fraction */
  AR_SCHEMA_RESERVED, /* key accepted, reported as not available in this build */
  AR_SCHEMA_ANY      /* any value: the module that reads the file checks it
                        (a grammar of its own, such as a study's factors) */
} ar_schema_type;

typedef enum ar_schema_rule_kind {
  AR_SCHEMA_RULES_END = 0,
  AR_SCHEMA_ONE_OF,  /* exactly one of a and b must be given */
  AR_SCHEMA_CONFLICT /* a and b must not be given together */
} ar_schema_rule_kind;

typedef struct ar_schema_rule {
  ar_schema_rule_kind kind;
  const char *a, *b;
  const char *why; /* completes the message, e.g. "test data comes from generate" */
} ar_schema_rule;

/* One key of a file: its type, range, enum values, default, whether it is
 * required, documentation and, for mappings and lists, the entries below
 * it.  A table is an array ended by an entry with key NULL ({0}); write
 * entries with designated initializers, the fields not named are 0. */
typedef struct ar_schema ar_schema;
struct ar_schema {
  const char *key; /* NULL ends a kids array */
  ar_schema_type type;
  bool required;
  int64_t imin, imax;        /* AR_SCHEMA_INT; imax INT64_MAX: no upper bound */
  double fmin, fmax;         /* AR_SCHEMA_FLOAT; fmax INFINITY: no upper bound */
  bool fmin_open, fmax_open; /* AR_SCHEMA_FLOAT: bound excluded */
  const char *const *values; /* AR_SCHEMA_ENUM: NULL-terminated */
  int min_items;             /* AR_SCHEMA_LIST */
  const char *def;           /* default as YAML text; NULL: none, or computed */
  const char *def_doc;       /* default shown in the docs when computed */
  const char *doc;           /* one or more sentences for the reference */
  const char *reserved_msg;  /* AR_SCHEMA_RESERVED: the error message */
  const ar_schema *kids;     /* MAP, VARIANT: keys; LIST: the item entry */
  const ar_schema_rule *rules; /* MAP: AR_SCHEMA_RULES_END-terminated, or NULL */
  /* What the value must be, in the table's own words ("a whole number
   * from 1 to 1000"); NULL: said from the type.  Set, every problem with
   * the value reads "expected EXPECT, got VALUE", and a missing required
   * key "missing required key 'KEY'; expected EXPECT". */
  const char *expect;
  /* The default applies only together with other keys (an op's attribute,
   * a graph model's setting): a resolved job (ar_spec.resolved) has the
   * key only where the file gave it, never filled in. */
  bool only_given;
};

/* A checked value of a scalar entry. */
typedef struct ar_schema_value {
  int64_t i;     /* INT; SIZE: bytes */
  double f;      /* FLOAT; SIZE: fraction */
  int e;         /* ENUM: index into values */
  const char *s; /* STRING, NAME, PATH, DEVICE: borrowed from the node */
} ar_schema_value;

/* A node of a parsed YAML file.  Read-only for everyone but the spec
 * module; the tree belongs to whoever holds its root. */
typedef enum ar_ynode_kind {
  AR_YNODE_SCALAR = 0,
  AR_YNODE_MAP,
  AR_YNODE_SEQ
} ar_ynode_kind;

typedef struct ar_ynode ar_ynode;
struct ar_ynode {
  ar_ynode_kind kind;
  int line, col;   /* 1-based position of the node's first character */
  int set;         /* -1: written in the file; i >= 0: made by the i-th --set */
  bool plain;      /* scalar written without quotes (plain style) */
  size_t len;      /* scalar: bytes in text, not counting the final NUL */
  char *text;      /* scalar: len bytes plus a NUL; may hold inner NULs ("\0") */
  int n, cap;      /* map: pairs; seq: items (cap: allocated) */
  ar_ynode **keys; /* map: (n) scalar key nodes; NULL for a sequence */
  ar_ynode **vals; /* map: (n) values; seq: (n) items */
};

/* Reads the YAML file at path with the same safeguards as job files (at
 * most AR_SPEC_MAX_BYTES; anchors, aliases, tags and several documents
 * refused; nesting and size bounded).  `what` names the file in messages
 * ("study file").  Returns AR_OK and *out, the root (NULL for an empty
 * file; free with ar_ynode_destroy); duplicate keys are reported in diags
 * and still give AR_OK.  AR_IO when the file cannot be read, AR_SPEC when
 * it is too large or not YAML (both with the problem in diags, *out NULL),
 * AR_NOMEM.  Appends to diags.  Reentrant. */
ar_status ar_yaml_load(const char *path, const char *what, ar_ynode **out,
                       ar_diags *diags);

/* Frees a node and everything below it.  NULL is a no-op. */
void ar_ynode_destroy(ar_ynode *n);

/* The value stored under `key` (compared with the whole key, inner NULs
 * included), borrowed from map; NULL when absent or map is not a mapping. */
const ar_ynode *ar_ynode_get(const ar_ynode *map, const char *key);

/* True when n is a scalar whose bytes equal the string s. */
bool ar_ynode_is(const ar_ynode *n, const char *s);

/* A scalar's text (a key's or a value's) for a message, written into buf
 * (cap >= 8): control characters escaped, cut to 60 characters with
 * "...".  Returns buf. */
char *ar_ynode_quote(const ar_ynode *n, char *buf, size_t cap);

/* Checks v against the entry s exactly as job files are checked (kinds,
 * ranges, enum values, required keys, rules, keys a mapping does not have),
 * appending each problem to diags with v's file position and the key path
 * below `path` (the path of v itself; NULL or "" at the top).  One
 * difference: a key the table does not have is reported with the path of
 * the mapping that holds it ("eval: unknown key 'x'"), where job files
 * name the key itself.  Suggestions for misspelt keys come from s's table.
 * AR_OK (problems or not) or AR_NOMEM.  Reentrant; diags' strings are
 * copies. */
ar_status ar_schema_check(const ar_schema *s, const ar_ynode *v, const char *path,
                          ar_diags *diags);

/* The value of `key` in the mapping m, described by the MAP entry `map`
 * (which must list key), read through the same parser as ar_schema_check,
 * or the entry's default when the key is absent (m may be NULL).  false
 * when the value is not valid (ar_schema_check reports why) or absent
 * without a default.  Strings are borrowed from m or the table.  A key the
 * table does not list, or a default its own parser refuses, is a bug in
 * the table: AR_ASSERT aborts. */
bool ar_schema_get(const ar_schema *map, const ar_ynode *m, const char *key,
                   ar_schema_value *out);

/* Names for messages and summaries. */
const char *ar_act_name(ar_act a);
/* runtime.policy as written in a job file ("fifo", "pack", ...), which is
 * also the lanes' policy name (lanes/policies.c); "fifo" out of range. */
const char *ar_policy_name(ar_policy_kind k);
/* The policy named `name`: true and *out, or false for an unknown name. */
bool ar_policy_parse(const char *name, ar_policy_kind *out);
/* "fifo, pack, srtf, fair, priority", for messages (static storage). */
const char *ar_policy_names(void);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_SPEC_H */
