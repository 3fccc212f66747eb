// A small metrics registry: counters, gauges and fixed-bucket histograms, each a family
// of series told apart by labels, rendered in the Prometheus text exposition format
// 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Naming (checked when a series is created; a bad name is a programming error and makes
// the call return a series that belongs to no family, logged once as an error):
// - every family name gets the registry prefix ("groupsgd_");
// - names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* without "__";
// - counters end in "_total"; use base units (_seconds, _bytes) in the name.
//
// Rendering: families in the order they were first created, series of a family sorted by
// their label values; histograms as _bucket{le="..."} (cumulative, "+Inf" last), _sum,
// _count. Label values are escaped (\\, \", \n), HELP text too (\\, \n).
//
// Thread rule: every method may be called from any thread. One mutex guards the whole
// registry: the coordinator thread updates series (an uncontended lock per update), the
// HTTP thread holds the lock while it renders. A Counter&/Gauge&/Histogram& handle stays
// valid as long as the registry (and its series is not removed); keep handles rather
// than looking series up on every update.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace groupsgd::ops {

// Label name/value pairs, in the order the family declares its label names.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry;

// Monotonic count. inc() with a negative or non-finite amount is ignored.
class Counter {
 public:
  void inc(double amount = 1);
  double value() const;

 private:
  friend class MetricsRegistry;
  explicit Counter(std::mutex* mu) : mu_(mu) {}
  std::mutex* mu_;  // the registry's mutex (borrowed: the registry owns every series)
  double value_ = 0;
};

// A value that goes up and down.
class Gauge {
 public:
  void set(double value);
  void add(double amount);
  double value() const;

 private:
  friend class MetricsRegistry;
  explicit Gauge(std::mutex* mu) : mu_(mu) {}
  std::mutex* mu_;
  double value_ = 0;
};

// Observations counted into fixed buckets (upper bounds, strictly increasing; +Inf is
// implicit), with their sum and count.
class Histogram {
 public:
  void observe(double value);
  std::uint64_t count() const;
  double sum() const;

 private:
  friend class MetricsRegistry;
  Histogram(std::mutex* mu, std::vector<double> bounds);
  std::mutex* mu_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class MetricsRegistry {
 public:
  explicit MetricsRegistry(std::string prefix = "groupsgd_");
  // A view of `parent` (borrowed; outlives the view): every series created or removed
  // through it carries `const_labels` before its own labels (a job's coordinator:
  // job="NAME"). The series live in the parent; render() renders the parent.
  MetricsRegistry(MetricsRegistry* parent, MetricLabels const_labels);
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Returns the series of family `name` (without the prefix) with these labels, creating
  // the family (with this help text and these label names) and the series as needed.
  // Later calls for the same family must use the same type and label names.
  Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                       const MetricLabels& labels = {});
  // Removes one labelled series (e.g. a departed worker's); its handle dies with it.
  // Returns false when there was none.
  bool remove(std::string_view name, const MetricLabels& labels);

  // Adds the gauge `<prefix>build_info{version="..."} 1`.
  void setBuildInfo(std::string_view version);

  // The whole registry in the text format 0.0.4; ends with '\n' (empty when no series).
  std::string render() const;

  // Content-Type of render()'s output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Default buckets for durations in seconds: 1 ms .. 60 s.
  static std::vector<double> defaultSecondsBuckets();

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name;  // with the prefix
    std::string help;
    Type type = Type::kCounter;
    std::vector<std::string> label_names;
    std::vector<double> bounds;                         // histograms
    std::map<std::vector<std::string>, Series> series;  // key: label values
  };
  // Finds or creates the series; nullptr (and an error logged) on a naming/shape error.
  Series* findOrCreate(Type type, std::string_view name, std::string_view help,
                       const MetricLabels& labels, const std::vector<double>* bounds);
  void renderFamily(const Family& family, std::string* out) const;

  MetricLabels withConst(const MetricLabels& labels) const;

  MetricsRegistry* parent_ = nullptr;  // a view forwards everything here
  MetricLabels const_labels_;
  mutable std::mutex mu_;
  std::string prefix_;
  std::vector<std::unique_ptr<Family>> families_;  // creation order
  // Series handed out when a call was invalid: updates go nowhere visible.
  Series orphan_;
};

// Formats a sample value the way the text format expects: shortest round-trip decimal,
// "NaN", "+Inf", "-Inf".
std::string formatMetricValue(double value);

}  // namespace groupsgd::ops
