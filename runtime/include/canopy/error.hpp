#pragma once

/// @file
/// Errors and results of the library API. Every call that can fail returns
/// a `result<T>`: a value, or an `error` with a stable code, a message for
/// people and, for graph documents, the JSON path of what is wrong. Nothing
/// in the API throws, except `result::value()` on an error (as
/// `std::expected::value()` does).

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <canopy/export.hpp>

namespace canopy {

/// What went wrong. The values are stable: new codes are added at the end.
enum class errc : uint8_t {
  invalid = 1,       ///< bad input: a graph (see `error::details`), inputs, a name, an option
  not_found,         ///< no such execution, graph, agent or signal target
  conflict,          ///< the operation does not fit the current state (resume a running execution, a name taken)
  stopped,           ///< the work was stopped (a `fn` step's checkpoint after a stop)
  step_failed,       ///< a `fn` step failed on purpose (`fn_fail`)
  store_unreachable, ///< the store could not be opened, read or written
  store_busy,        ///< another process held the store's write lock too long
  fenced,            ///< another process took the execution's tree over; this one writes nothing more of it
  busy,              ///< an agent refused a message (its `on_busy` policy is `reject`)
  quota_exceeded,    ///< a limit of the runtime was reached
  timeout,           ///< a bounded wait passed
  shutting_down,     ///< the runtime is closing
  internal,          ///< anything else (the message says what)
};

/// @returns the code's name, e.g. `"not_found"`.
CANOPY_API const char* to_string(errc x);

/// One problem at one place of a document.
struct problem {
  std::string path;    ///< RFC 6901 JSON pointer, `""` for the whole document
  std::string message;
};

/// An error: a code, a message and, for documents, where.
class CANOPY_API error {
public:
  error(errc code, std::string message, std::vector<problem> details = {});

  errc code() const { return code_; }
  const std::string& message() const { return message_; }
  /// The JSON path of the first problem, `""` when there is none.
  const std::string& path() const;
  /// Every problem found (a graph reports all of them at once); may be empty.
  const std::vector<problem>& details() const { return details_; }

  /// `"PATH: MESSAGE"`, or the message alone when there is no path.
  std::string to_string() const;

private:
  errc code_;
  std::string message_;
  std::vector<problem> details_;
};

/// Thrown by `result::value()` called on an error.
class CANOPY_API bad_result_access : public std::exception {
public:
  explicit bad_result_access(canopy::error err) : err_(std::move(err)) {}
  const char* what() const noexcept override { return "canopy: result holds an error"; }
  const canopy::error& error() const { return err_; }

private:
  canopy::error err_;
};

/// A value of type `T`, or an `error`.
template <class T>
class result {
public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(canopy::error err) : v_(std::in_place_index<1>, std::move(err)) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  /// The value. Precondition: `has_value()`.
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }

  /// The value; throws `bad_result_access` on an error.
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }

  /// The error. Precondition: `!has_value()`.
  const canopy::error& error() const { return std::get<1>(v_); }

private:
  void check() const {
    if (!has_value())
      throw bad_result_access{std::get<1>(v_)};
  }
  std::variant<T, canopy::error> v_;
};

/// Success without a value, or an `error`.
template <>
class result<void> {
public:
  result() = default;
  result(canopy::error err) : err_(std::move(err)) {}

  bool has_value() const { return !err_; }
  explicit operator bool() const { return has_value(); }
  /// Throws `bad_result_access` on an error.
  void value() const {
    if (err_)
      throw bad_result_access{*err_};
  }
  /// The error. Precondition: `!has_value()`.
  const canopy::error& error() const { return *err_; }

private:
  std::optional<canopy::error> err_;
};

} // namespace canopy
