# loadtest/plot/soak-rss-fds.gp - soak: the router's RSS and open
# descriptors over time, one line per report, with loadgen's pass bounds.
#
#   gnuplot -c soak-rss-fds.gp VARS TERMINAL
#
# VARS is the soak-rss-fds.vars.gp written by extract.py (out_png,
# subtitle, soak_* arrays of n reports); TERMINAL pngcairo or png. plot.sh
# runs this; see it for the whole pipeline.
load ARG1
set terminal @ARG2 size 1000,800 noenhanced font ',10'
set output out_png
set grid
set lmargin 10
set key top left Left reverse opaque box
set xrange [0:t_top]
set xlabel 'time since the load started (s)'
# Where the RSS baseline is taken and where the load stops (the last
# sample is 2 s later, idle): the same on both panels.
do for [i=1:n] {
  set arrow from soak_warmup_s[i], graph 0 to soak_warmup_s[i], graph 1 nohead dt 3 lc 'gray40'
  set arrow from soak_load_s[i], graph 0 to soak_load_s[i], graph 1 nohead dt 3 lc 'gray40'
}
set label 1 'end of warm-up (RSS baseline)' at first soak_warmup_s[1], graph 0.04 offset 0.5,0 tc 'gray40'
set label 2 'load stopped' at first soak_load_s[1], graph 0.04 right offset -0.5,0 tc 'gray40'
set multiplot layout 2,1 title "soak: router memory and descriptors under create -> exec -> terminate churn\n".subtitle

set title 'router resident memory (VmRSS)'
set ylabel 'router RSS (MiB)'
set yrange [0:rss_top]
plot for [i=1:n] soak_dat[i] using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc i \
       title (n > 1 ? soak_title[i] : 'router RSS (MiB)'), \
     for [i=1:n] soak_rss_bound[i] with lines dt 2 lw 1.5 lc i \
       title sprintf('pass bound %.1f MiB (1.5 x RSS after warm-up + 20 MiB)', soak_rss_bound[i])

set title 'router open file descriptors (/proc/<pid>/fd)'
set ylabel 'open fds'
set yrange [0:fd_top]
plot for [i=1:n] soak_dat[i] using 1:3 with linespoints lw 2 pt 7 ps 0.5 lc i \
       title (n > 1 ? soak_title[i] : 'open fds'), \
     for [i=1:n] soak_fd_bound[i] with lines dt 2 lw 1.5 lc i \
       title sprintf('pass bound %.0f (most from warm-up to half-way + slack), checked idle at the end', \
                     soak_fd_bound[i])
unset multiplot
