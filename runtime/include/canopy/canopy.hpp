#pragma once

/// @file
/// The one include of the canopy library:
///
///     #include <canopy/canopy.hpp>
///
///     auto rt = canopy::runtime::open({".canopy"});
///     rt.value()->register_fn("greet", [](canopy::fn_context& ctx) -> canopy::result<canopy::json> {
///       return canopy::json{{"text", "hello " + ctx.with().value("name", "")}};
///     });
///     auto g = canopy::graph_builder{"hello"}.input("name")
///                .step("greet").fn("greet").with({{"name", "${inputs.name}"}})
///                .output("text", "${steps.greet.text}").build();
///     auto run = rt.value()->start(g.value(), {{"name", "world"}});
///     auto done = run->wait();   // done->outputs == {"text": "hello world"}
///
/// Link with `find_package(canopy)` (target `canopy::canopy`) or
/// `pkg-config --cflags --libs canopy`.

#include <canopy/error.hpp>
#include <canopy/graph.hpp>
#include <canopy/records.hpp>
#include <canopy/runtime.hpp>

/// The library's version, as `"MAJOR.MINOR.PATCH"`.
namespace canopy {
CANOPY_API const char* version();
} // namespace canopy
