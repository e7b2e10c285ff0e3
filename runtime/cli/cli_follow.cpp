// `run` and `resume` on the local home, in the foreground: the execution's
// events from its subscription into the foreground view (foreground_view.hpp:
// the live tree, Ctrl-C, the end), Ctrl-C as stops through the runtime.

#include <iostream>
#include <thread>

#include "runtime/cli/cli_common.hpp"
#include "runtime/node/document.hpp"
#include "runtime/cli/foreground_view.hpp"
#include "runtime/cli/render.hpp"
#include "persistence/error.hpp"

namespace canopy::core::cli {

int follow(const global_options& g, runtime& rt, const execution_handle& h,
           interrupt_guard& guard, bool as_json, uint64_t after) {
  foreground_view view{g, store_source(*rt.db()), h.id(), as_json, after,
                       "canopy --home " + rt.db()->home() + " resume " + h.id()};
  view.watch(guard, [h](bool force) {
    // A call into CAF from a thread that ends before the guard's returns.
    caf::error err;
    auto mode = force ? stop_mode::force : stop_mode::graceful;
    std::thread([&] {
      if (auto ticket = h.stop(mode); !ticket)
        err = ticket.error();
    }).join();
    return err;
  });
  subscription sub;
  if (!as_json)
    sub = h.subscribe([&view](const event_record& e) { view.apply(e); });
  auto rec = h.wait();
  sub.cancel();
  view.end();
  if (!rec && is(rec.error(), persistence_errc::fenced)) {
    // Another process took the tree over (its owner, as far as the store
    // knows): this one ended its steps and wrote nothing more.
    std::cerr << "error: execution " << h.id() << " was taken over by another process\n";
    return exit_failed;
  }
  if (!rec) {
    // The execution could not record its end (e.g. the store stayed busy):
    // once this process is gone, the next command that opens the store makes
    // it `stopped`/`interrupted`, resumable from its last recorded state.
    int rc = fail(rec.error());
    view.resume_hint();
    return rc;
  }
  auto doc = load_document(*rt.db(), h.id());
  if (!doc)
    return fail(doc.error());
  return view.finish(*rec, *doc);
}

} // namespace canopy::core::cli
