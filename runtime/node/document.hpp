#pragma once

// The execution document, built from the store: what `show --json`, the
// API's execution and tree answers and the dashboard read.

#include <string>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "persistence/store.hpp"

namespace canopy::core {

/// What to include in a document.
struct document_options {
  bool steps = true;
  bool children = true; ///< recursively, as `children`
};

/// Renders one record as the execution document (no `steps`/`children`).
nlohmann::json execution_summary(const execution_record& rec);

/// Renders a stop's outcome as it rides in a stop answer: `{id, result,
/// mode, requested_at, handled_at}`; `req` is the stored
/// request (null fields without one: nothing was stored).
nlohmann::json stop_summary(const stop_record* req, const std::string& result,
                            const std::string& mode);

/// What the model calls of document `tree` and its `children` used:
/// `{calls, prompt_tokens, completion_tokens, tokens, spend}` summed over
/// every step whose result has a `usage` (a completed call; a tool loop's
/// turns are its children's `model` steps). `spend` is null when no call
/// was priced. @returns null when the tree made no model call.
nlohmann::json model_totals(const nlohmann::json& tree);

/// Loads execution `id` and renders its document: every step of its graph
/// by name (steps never started appear `pending` with attempt 0), each with
/// its `kind` and `needs` from the graph (readers order them by `needs`),
/// and with `opts.children` every descendant under `children` and, at the
/// top of a tree that made a model call, its `model` totals (see
/// `model_totals`; a tree without one has no `model` key).
/// @returns the document, `not_found`, or a store error. Thread-safe.
caf::expected<nlohmann::json> load_document(const store& db, const std::string& id,
                                            document_options opts = {});

/// `load_document` of `rec`, an execution record the caller read from `db`
/// just before (a request's ownership check): the record is not read again.
/// @returns the document or a store error. Thread-safe.
caf::expected<nlohmann::json> load_document(const store& db, execution_record rec,
                                            document_options opts = {});

} // namespace canopy::core
