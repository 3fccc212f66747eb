#include "groupsgd/ops/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "groupsgd/common/log.h"

namespace groupsgd::ops {
namespace {

bool isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

bool validMetricName(std::string_view name) {
  if (name.empty() || !(isNameStart(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return isNameStart(c) || isDigit(c) || c == ':'; });
}

bool validLabelName(std::string_view name) {
  if (name.empty() || !isNameStart(name[0]) || name.substr(0, 2) == "__") return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return isNameStart(c) || isDigit(c); });
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void appendEscaped(std::string_view text, bool quotes, std::string* out) {
  for (char c : text) {
    if (c == '\\')
      *out += "\\\\";
    else if (c == '\n')
      *out += "\\n";
    else if (quotes && c == '"')
      *out += "\\\"";
    else
      *out += c;
  }
}

// {a="x",b="y"} plus an optional extra pair (the histogram's le); nothing when empty.
void appendLabels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                  const char* extra_name, const std::string& extra_value, std::string* out) {
  if (names.empty() && extra_name == nullptr) return;
  *out += '{';
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) *out += ',';
    *out += names[i];
    *out += "=\"";
    appendEscaped(values[i], true, out);
    *out += '"';
  }
  if (extra_name != nullptr) {
    if (!names.empty()) *out += ',';
    *out += extra_name;
    *out += "=\"";
    *out += extra_value;
    *out += '"';
  }
  *out += '}';
}

const char* typeName(int type) {
  static const char* kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

}  // namespace

std::string formatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // also -0
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, res.ptr);
}

void Counter::inc(double amount) {
  if (!(amount >= 0) || std::isinf(amount)) return;
  std::lock_guard<std::mutex> lock(*mu_);
  value_ += amount;
}

double Counter::value() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return value_;
}

void Gauge::set(double value) {
  std::lock_guard<std::mutex> lock(*mu_);
  value_ = value;
}

void Gauge::add(double amount) {
  std::lock_guard<std::mutex> lock(*mu_);
  value_ += amount;
}

double Gauge::value() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return value_;
}

Histogram::Histogram(std::mutex* mu, std::vector<double> bounds)
    : mu_(mu), bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  const std::size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le: <=
  std::lock_guard<std::mutex> lock(*mu_);
  counts_[bucket] += 1;
  sum_ += value;
  count_ += 1;
}

std::uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return count_;
}

double Histogram::sum() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return sum_;
}

MetricsRegistry::MetricsRegistry(std::string prefix) : prefix_(std::move(prefix)) {
  orphan_.counter.reset(new Counter(&mu_));
  orphan_.gauge.reset(new Gauge(&mu_));
  orphan_.histogram.reset(new Histogram(&mu_, {}));
}

MetricsRegistry::MetricsRegistry(MetricsRegistry* parent, MetricLabels const_labels)
    : MetricsRegistry(parent->prefix_) {
  parent_ = parent;
  const_labels_ = std::move(const_labels);
}

MetricsRegistry::~MetricsRegistry() = default;

MetricLabels MetricsRegistry::withConst(const MetricLabels& labels) const {
  MetricLabels all = const_labels_;
  all.insert(all.end(), labels.begin(), labels.end());
  return all;
}

std::vector<double> MetricsRegistry::defaultSecondsBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

MetricsRegistry::Series* MetricsRegistry::findOrCreate(Type type, std::string_view name,
                                                       std::string_view help,
                                                       const MetricLabels& labels,
                                                       const std::vector<double>* bounds) {
  const std::string full = prefix_ + std::string(name);
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (const auto& [k, v] : labels) {
    names.push_back(k);
    values.push_back(v);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(families_.begin(), families_.end(),
                         [&](const auto& f) { return f->name == full; });
  Family* family = nullptr;
  if (it != families_.end()) {
    family = it->get();
    if (family->type != type || family->label_names != names ||
        (bounds != nullptr && family->bounds != *bounds)) {
      GSGD_ERROR("metrics: " << full << " used with another type, label set or buckets");
      return nullptr;
    }
  } else {
    bool ok = validMetricName(full) && (type != Type::kCounter || endsWith(full, "_total"));
    for (const auto& n : names) ok = ok && validLabelName(n) && n != "le";
    if (bounds != nullptr) {
      for (std::size_t i = 0; i < bounds->size(); ++i) {
        ok = ok && std::isfinite((*bounds)[i]) && (i == 0 || (*bounds)[i - 1] < (*bounds)[i]);
      }
    }
    if (!ok) {
      GSGD_ERROR("metrics: invalid metric "
                 << full << " (name, label names, counter without _total, or buckets)");
      return nullptr;
    }
    auto created = std::make_unique<Family>();
    created->name = full;
    created->help = std::string(help);
    created->type = type;
    created->label_names = names;
    if (bounds != nullptr) created->bounds = *bounds;
    family = created.get();
    families_.push_back(std::move(created));
  }
  Series& series = family->series[values];
  if (!series.counter && !series.gauge && !series.histogram) {
    if (type == Type::kCounter) series.counter.reset(new Counter(&mu_));
    if (type == Type::kGauge) series.gauge.reset(new Gauge(&mu_));
    if (type == Type::kHistogram) series.histogram.reset(new Histogram(&mu_, family->bounds));
  }
  return &series;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help,
                                  const MetricLabels& labels) {
  if (parent_ != nullptr) return parent_->counter(name, help, withConst(labels));
  Series* s = findOrCreate(Type::kCounter, name, help, labels, nullptr);
  return s != nullptr ? *s->counter : *orphan_.counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help,
                              const MetricLabels& labels) {
  if (parent_ != nullptr) return parent_->gauge(name, help, withConst(labels));
  Series* s = findOrCreate(Type::kGauge, name, help, labels, nullptr);
  return s != nullptr ? *s->gauge : *orphan_.gauge;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      std::vector<double> bounds, const MetricLabels& labels) {
  if (parent_ != nullptr)
    return parent_->histogram(name, help, std::move(bounds), withConst(labels));
  Series* s = findOrCreate(Type::kHistogram, name, help, labels, &bounds);
  return s != nullptr ? *s->histogram : *orphan_.histogram;
}

bool MetricsRegistry::remove(std::string_view name, const MetricLabels& labels) {
  if (parent_ != nullptr) return parent_->remove(name, withConst(labels));
  const std::string full = prefix_ + std::string(name);
  std::vector<std::string> values;
  for (const auto& kv : labels) values.push_back(kv.second);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& f : families_) {
    if (f->name == full) return f->series.erase(values) > 0;
  }
  return false;
}

void MetricsRegistry::setBuildInfo(std::string_view version) {
  gauge("build_info", "Build information; the value is always 1.",
        {{"version", std::string(version)}})
      .set(1);
}

void MetricsRegistry::renderFamily(const Family& f, std::string* out) const {
  if (f.series.empty()) return;
  *out += "# HELP " + f.name + ' ';
  appendEscaped(f.help, false, out);
  *out += "\n# TYPE " + f.name + ' ' + typeName(static_cast<int>(f.type)) + '\n';
  for (const auto& [values, s] : f.series) {
    if (f.type != Type::kHistogram) {
      *out += f.name;
      appendLabels(f.label_names, values, nullptr, {}, out);
      *out += ' ';
      *out += formatMetricValue(f.type == Type::kCounter ? s.counter->value_ : s.gauge->value_);
      *out += '\n';
      continue;
    }
    const Histogram& h = *s.histogram;
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= h.bounds_.size(); ++i) {
      cumulative += h.counts_[i];
      *out += f.name + "_bucket";
      const std::string le = i < h.bounds_.size() ? formatMetricValue(h.bounds_[i]) : "+Inf";
      appendLabels(f.label_names, values, "le", le, out);
      *out += ' ' + std::to_string(cumulative) + '\n';
    }
    *out += f.name + "_sum";
    appendLabels(f.label_names, values, nullptr, {}, out);
    *out += ' ' + formatMetricValue(h.sum_) + '\n';
    *out += f.name + "_count";
    appendLabels(f.label_names, values, nullptr, {}, out);
    *out += ' ' + std::to_string(h.count_) + '\n';
  }
}

std::string MetricsRegistry::render() const {
  if (parent_ != nullptr) return parent_->render();
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) renderFamily(*f, &out);
  return out;
}

}  // namespace groupsgd::ops
