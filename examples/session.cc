/* SPDX-License-Identifier: MIT */
// session.cc - session.c's essentials from C++: a KV cache in kvmemd,
// released, acquired, and taken back after kvmemd restarts
//
// kvmem/kvmem.h is a C header that C++ includes as it is (extern "C"
// inside). The library hands out raw pointers that kvmem_close() and
// kvmem_seq_free() release, so unique_ptr with those as deleters owns them
// here; its calls return 0 or a negative errno, which check() turns into a
// std::system_error carrying libkvmem's own words (kvmem_strerror()).
//
//   session-cc [-w] [SOCKET]     as session.c: -w waits for a line on
//                                stdin, for kvmemd to be restarted
//
// Build (examples/README.md): c++ -std=c++17 -o session-cc session.cc
// $(pkg-config --cflags --libs kvmem)
#include <cerrno>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <kvmem/kvmem.h>

namespace {

constexpr uint32_t kLayers = 2, kKvHeads = 2, kHeadDim = 64, kHeads = 8;
constexpr uint32_t kPrompt = 70, kTokens = 110;
constexpr size_t kRow = kKvHeads * kHeadDim;

struct CacheClose {
	void operator()(kvmem_cache *c) const
	{
		kvmem_close(c);
	}
};
struct SeqFree {
	void operator()(kvmem_seq *s) const
	{
		kvmem_seq_free(s);
	}
};
using Cache = std::unique_ptr<kvmem_cache, CacheClose>;
using Seq = std::unique_ptr<kvmem_seq, SeqFree>;

int check(int ret, const char *what)
{
	if (ret < 0)
		throw std::system_error(-ret, std::generic_category(),
					std::string(what) + ": " +
						kvmem_strerror(ret));
	return ret;
}

// A model's K and V, layer by layer ([layer][token][row]), and a query:
// xorshift values in [-1, 1), the same on every run.
struct Values {
	std::vector<float> k, v, q;

	Values()
	    : k(kLayers * kTokens * kRow), v(k.size()), q(kHeads * kHeadDim)
	{
		uint32_t x = 88172645u;
		auto next = [&x] {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			return float(x >> 8) / float(1u << 23) - 1.0f;
		};
		for (size_t i = 0; i < k.size(); i++) {
			k[i] = next();
			v[i] = next();
		}
		for (float &f : q)
			f = next();
	}
};

// Append up to @to tokens of every layer. An append that fills a page
// needs kvmemd to seal it: if kvmemd is gone it fails with -ENOTCONN and
// keeps the tokens before; after kvmem_reconnect() it goes on from
// kvmem_seq_len(). A session kvmemd did not keep (-ESTALE) is thrown.
void append_to(kvmem_cache *c, kvmem_seq *s, const Values &val, uint32_t to)
{
	for (uint32_t l = 0; l < kLayers; l++) {
		int ret;

		for (;;) {
			uint32_t len = kvmem_seq_len(s, l);
			size_t at = (l * kTokens + len) * kRow;

			ret = kvmem_seq_append(s, l, &val.k[at], &val.v[at],
					       to - len);
			if (ret != -ENOTCONN)
				break;
			std::cout << "kvmemd connection lost: taking the "
				     "session back\n";
			check(kvmem_reconnect(c), "kvmem_reconnect");
		}
		check(ret, "kvmem_seq_append");
	}
}

std::vector<float> attend(kvmem_seq *s, const Values &val)
{
	std::vector<float> out(kHeads * kHeadDim);
	kvmem_attend_opts opts{};

	opts.n_heads = kHeads;
	check(kvmem_attend(s, 0, val.q.data(), out.data(), &opts, nullptr),
	      "kvmem_attend");
	return out;
}

// A new session holding the prompt. The sequence is declared after the
// cache at the call site, so it is freed first.
void start(const std::string &path, const kvmem_geometry &g, const Values &val,
	   Cache &cache, Seq &seq)
{
	kvmem_cache *c = nullptr;
	kvmem_seq *s = nullptr;
	int ret = kvmem_connect(path.c_str(), &g, nullptr, &c);

	if (ret)
		throw std::system_error(-ret, std::generic_category(),
					std::string("kvmem_connect: ") +
						kvmem_connect_error());
	cache.reset(c);
	check(kvmem_seq_create(c, &s), "kvmem_seq_create");
	seq.reset(s);
	append_to(c, s, val, kPrompt);
	std::cout << "session " << kvmem_session_id(c) << ": appended "
		  << kvmem_seq_len(s, 0) << " tokens to " << kLayers
		  << " layers\n";
}

int run(bool wait, const std::string &path)
{
	const Values val;
	kvmem_geometry g{};
	kvmem_stats st;
	Cache cache;
	Seq seq;

	g.layers = kLayers;
	g.kv_heads = kKvHeads;
	g.head_dim = kHeadDim;
	kvmem_geometry_default(&g);
	std::cout << "kvmemd socket: " << path << "\n";
	start(path, g, val, cache, seq);

	const std::vector<float> before = attend(seq.get(), val);
	check(kvmem_seq_release(seq.get()), "kvmem_seq_release");
	std::cout << "released: kvmemd may move its pages to a slower tier\n";
	check(kvmem_seq_acquire(seq.get()), "kvmem_seq_acquire");
	std::cout << "acquired: resident again, attention the same bits: "
		  << (attend(seq.get(), val) == before ? "yes" : "no") << "\n";

	if (wait) {
		std::string line;

		std::cout << "restart kvmemd now (systemctl restart kvmemd), "
			     "then press Enter"
			  << std::endl;
		std::getline(std::cin, line);
	}

	// Reads and attention over resident pages never ask kvmemd; its
	// counters do, as an engine's next allocation or seal would.
	int ret = kvmem_daemon_stats(cache.get(), &st);
	if (ret == -ENOTCONN) {
		std::cout
			<< "kvmemd connection lost: taking the session back\n";
		ret = kvmem_reconnect(cache.get());
		if (!ret)
			std::cout << "took session "
				  << kvmem_session_id(cache.get()) << " back\n";
	}
	if (ret == -ESTALE || ret == -EOPNOTSUPP) {
		std::cout << "kvmemd did not keep the session ("
			  << (ret == -EOPNOTSUPP
				      ? "it offered no way to: it runs without "
					"a descriptor store"
				      : kvmem_strerror(ret))
			  << "): starting over\n";
		seq.reset();
		start(path, g, val, cache, seq);
		ret = 0;
	}
	check(ret, "kvmem_reconnect");
	std::cout << "session " << kvmem_session_id(cache.get()) << " holds "
		  << kvmem_seq_len(seq.get(), 0)
		  << " tokens, attention the same bits: "
		  << (attend(seq.get(), val) == before ? "yes" : "no") << "\n";

	append_to(cache.get(), seq.get(), val, kTokens);
	std::cout << "appended up to " << kvmem_seq_len(seq.get(), 0)
		  << " tokens\n";
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	std::vector<std::string> args(argv + 1, argv + argc);
	bool wait = !args.empty() && args[0] == "-w";
	char path[108];

	if (wait)
		args.erase(args.begin());
	if (args.size() > 1 || (args.size() == 1 && args[0][0] == '-')) {
		std::cerr << "usage: session-cc [-w] [SOCKET]\n";
		return 2;
	}
	if (args.empty() && !kvmem_socket_path(path, sizeof(path)))
		return 1;
	try {
		return run(wait, args.empty() ? std::string(path) : args[0]);
	} catch (const std::system_error &e) {
		std::cerr << e.what() << "\n";
		return 1;
	}
}
